// The JVM server of tests/runtime_jvm.rs: com.sun.net.httpserver on a
// pool of threads, each request hashing for a while in Handler.compute,
// so that on-CPU time is the handler's. Prints its port, serves for
// SECONDS, exits. `Server SECONDS [ITERATIONS]`: the hashing's rounds a
// request (200000, about 10 ms here; scripts/bench-runtimes' busy server
// asks for 2000, a Java service's rate of thousands a second).
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.util.concurrent.Executors;

public class Server {
    static class Handler implements HttpHandler {
        static int iterations = 200_000;

        static long compute(long seed) {
            long h = seed;
            for (int i = 0; i < iterations; i++) {
                h = h * 6364136223846793005L + 1442695040888963407L;
                h ^= h >>> 29;
            }
            return h;
        }

        public void handle(HttpExchange ex) throws java.io.IOException {
            byte[] body = (Long.toString(compute(System.nanoTime())) + "\n").getBytes();
            ex.sendResponseHeaders(200, body.length);
            try (OutputStream os = ex.getResponseBody()) {
                os.write(body);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        double secs = Double.parseDouble(args[0]);
        if (args.length > 1) {
            Handler.iterations = Integer.parseInt(args[1]);
        }
        HttpServer s = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 128);
        s.createContext("/", new Handler());
        s.setExecutor(Executors.newFixedThreadPool(4, r -> {
            Thread t = new Thread(r);
            t.setName("pool");
            return t;
        }));
        s.start();
        System.out.println(s.getAddress().getPort());
        System.out.flush();
        Thread.sleep((long) (secs * 1000));
        s.stop(0);
        System.exit(0);
    }
}
