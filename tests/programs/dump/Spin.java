// For tests/dump.rs: the main thread computes in Spin.spin, called from
// Spin.loop; prints `ready` once both are compiled (after a second).
public class Spin {
    static long spin(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x += i ^ (x >>> 3);
        }
        return x;
    }

    static long loop(long until) {
        long x = 0;
        while (System.nanoTime() < until) {
            x += spin(100000);
        }
        return x;
    }

    public static void main(String[] args) {
        long x = loop(System.nanoTime() + 1_000_000_000L);
        System.out.println("ready");
        System.out.flush();
        for (;;) {
            x += loop(System.nanoTime() + 1_000_000_000L);
            if (x == 42) System.out.println(x);
        }
    }
}
