"""Python that driver.cpp's module init calls (the extension's import
runs Python under its own native frames)."""


def on_load(m):
    t = m.Tensor(2000)
    return t.sum(2)
