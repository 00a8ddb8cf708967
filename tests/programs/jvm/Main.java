// The JVM workload of tests/runtime_jvm.rs: four threads, each doing one
// thing a profile must show, for SECONDS; then each thread's own measure
// of its CPU time (ThreadMXBean) as one JSON line per thread on stdout.
//   spin:   a CPU loop in Main.spin (JIT-compiled after a few calls)
//   sleep:  Thread.sleep, 10 ms at a time
//   lock-a, lock-b: a contended synchronized block (each holds it 5 ms)
//   sync:   write + fsync of a file in the temporary folder
import java.io.FileOutputStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.ArrayList;
import java.util.List;

public class Main {
    static final Object LOCK = new Object();
    static volatile long sink;

    static long spin(long n) {
        long h = n;
        for (long i = 0; i < 2_000_000; i++) {
            h = h * 6364136223846793005L + 1442695040888963407L;
        }
        return h;
    }

    static void spinLoop(long until) {
        long n = 0;
        while (System.nanoTime() < until) {
            sink = spin(n++);
        }
    }

    static void sleepLoop(long until) throws InterruptedException {
        while (System.nanoTime() < until) {
            Thread.sleep(10);
        }
    }

    static void lockLoop(long until) {
        while (System.nanoTime() < until) {
            synchronized (LOCK) {
                long t = System.nanoTime() + 5_000_000;
                while (System.nanoTime() < t) {
                    sink++;
                }
            }
        }
    }

    static void syncLoop(long until, String path) throws Exception {
        byte[] block = new byte[4096];
        try (FileOutputStream f = new FileOutputStream(path)) {
            while (System.nanoTime() < until) {
                f.write(block);
                f.getFD().sync();
            }
        }
        new java.io.File(path).delete();
    }

    interface Body {
        void run() throws Exception;
    }

    public static void main(String[] args) throws Exception {
        double secs = Double.parseDouble(args[0]);
        String tmp = args.length > 1 ? args[1] : System.getProperty("java.io.tmpdir");
        long until = System.nanoTime() + (long) (secs * 1e9);
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        List<String> lines = new ArrayList<>();
        String[] names = {"spin", "sleep", "lock-a", "lock-b", "sync"};
        Body[] bodies = {
            () -> spinLoop(until),
            () -> sleepLoop(until),
            () -> lockLoop(until),
            () -> lockLoop(until),
            () -> syncLoop(until, tmp + "/jvm-sync-" + ProcessHandle.current().pid()),
        };
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < names.length; i++) {
            Body b = bodies[i];
            String name = names[i];
            Thread t = new Thread(() -> {
                long w0 = System.nanoTime();
                try {
                    b.run();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
                long cpu = mx.getCurrentThreadCpuTime();
                long wall = System.nanoTime() - w0;
                // Formatted outside the lock: the lock threads' only
                // monitor waits are then those of lockLoop's.
                String line = String.format("{\"thread\":\"%s\",\"cpu_ns\":%d,\"wall_ns\":%d}", name, cpu, wall);
                synchronized (lines) {
                    lines.add(line);
                }
            }, name);
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        for (String l : lines) {
            System.out.println(l);
        }
    }
}
