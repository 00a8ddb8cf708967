// A pybind11 extension shaped as PyTorch's bindings are, for
// tests/python_native.rs: functions that return new objects of a bound
// class (pybind11's type_caster_generic::cast), C++ that calls back into
// Python (autograd's hooks) from under a C++ stack deeper than the 64K of
// stack the capture copies, and a module init that runs Python (torch's
// lazily imported extensions). Built by the test with g++ and pybind11's
// headers (pybind11 from PyPI in target/venv-numpy).
#include <pybind11/pybind11.h>

#include <cmath>
#include <vector>

namespace py = pybind11;

struct Tensor {
    std::vector<double> d;
    explicit Tensor(size_t n) : d(n, 1.0) {}
};

__attribute__((noinline)) static double burn(const Tensor &t, int rounds) {
    double s = 0;
    for (int r = 0; r < rounds; r++)
        for (size_t i = 0; i < t.d.size(); i++) s += std::sqrt(t.d[i] + r + s * 1e-9);
    return s;
}

// One level of a deep C++ stack (4K a frame), the hook called at the
// bottom: the stack copied where a hook's stack is taken ends in here.
__attribute__((noinline)) static double descend(const py::object &hook, const Tensor &t, int depth) {
    volatile char pad[4096];
    pad[0] = static_cast<char>(depth);
    pad[sizeof pad - 1] = 0;
    double r = depth == 0 ? hook(t).cast<double>() : descend(hook, t, depth - 1);
    return r + pad[0] * 0.0 + pad[sizeof pad - 1];
}

PYBIND11_MODULE(driver, m) {
    // module_local: each copy of this file registers its own class.
    py::class_<Tensor>(m, "Tensor", py::module_local())
        .def(py::init<size_t>())
        .def("sum", [](const Tensor &t, int rounds) { return burn(t, rounds); });
    m.def("matmul", [](const Tensor &a, const Tensor &b) {
        Tensor t(a.d.size());
        for (size_t i = 0; i < t.d.size(); i++) t.d[i] = a.d[i] * b.d[(i * 7) % b.d.size()];
        return t;
    });
    m.def("backward", [](const py::object &hook, const Tensor &t, int depth) { return descend(hook, t, depth); });
    m.attr("VALUE") = py::module_::import("hooks").attr("on_load")(m);
}
