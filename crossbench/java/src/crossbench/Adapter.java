package crossbench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.openjdk.jmh.results.IterationResult;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.format.OutputFormatFactory;
import org.openjdk.jmh.runner.options.Options;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;
import org.openjdk.jmh.runner.options.VerboseMode;
import org.openjdk.jmh.util.Statistics;

/**
 * The Java adapter of sipsec crypto-bench (crossbench/protocol.md):
 * {@code --lib jca} (the JDK's SunJCE and SunRsaSign) or {@code --lib bc}
 * (BouncyCastle). The framework timing is JMH, in a forked JVM.
 */
public final class Adapter {
    private final String lib;
    private final Map<String, Rsa> keys = new HashMap<>();
    /** The load requests, so that JMH's forked JVM can load the same key. */
    private final Map<String, Map<String, Object>> loads = new HashMap<>();

    private Adapter(String lib) {
        this.lib = lib;
        Rsa.provider(lib);
    }

    private static byte[] hex(Object o) {
        String s = o == null ? "" : o.toString();
        if (s.length() % 2 != 0) {
            throw new IllegalArgumentException("odd-length hex");
        }
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }

    private static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) {
            s.append(String.format("%02x", x & 0xff));
        }
        return s.toString();
    }

    private Rsa key(Map<String, Object> req) {
        Rsa k = keys.get(String.valueOf(req.get("key")));
        if (k == null) {
            throw new IllegalArgumentException("unknown key " + req.get("key"));
        }
        return k;
    }

    private static int num(Map<String, Object> req, String name, int dflt) {
        Object v = req.get(name);
        return v instanceof Double ? ((Double) v).intValue() : dflt;
    }

    private Map<String, Object> handle(Map<String, Object> req) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        String op = String.valueOf(req.get("op"));
        switch (op) {
            case "hello":
                out.put("name", lib.equals("jca") ? "jca" : "bouncycastle");
                out.put("version", Rsa.version(lib));
                out.put("language", "java");
                out.put("variants", Arrays.asList("crt", "standard"));
                out.put("min_bits", 1024);
                out.put("framework", "JMH 1.37");
                break;
            case "load": {
                Rsa k = new Rsa(lib, req);
                keys.put(String.valueOf(req.get("id")), k);
                loads.put(String.valueOf(req.get("id")), req);
                out.put("bits", k.bits);
                break;
            }
            case "encrypt":
                out.put("ct", hex(key(req).encrypt(hex(req.get("msg")))));
                break;
            case "decrypt":
                out.put("msg", hex(key(req).decrypt(hex(req.get("ct")))));
                break;
            case "sign":
                out.put("sig", hex(key(req).sign(hex(req.get("msg")))));
                break;
            case "verify":
                out.put("valid", key(req).verify(hex(req.get("msg")), hex(req.get("sig"))));
                break;
            case "bench": {
                Rsa k = keys.get(String.valueOf(req.get("key")));
                Rsa.Op f = Rsa.prepare(lib, k, req);
                int n = Math.max(1, num(req, "iterations", 1));
                int reps = Math.max(1, num(req, "reps", 1));
                List<Double> ns = new ArrayList<>();
                for (int rep = 0; rep <= reps; rep++) {
                    long t0 = System.nanoTime();
                    for (int i = 0; i < n; i++) {
                        f.call();
                    }
                    long dt = System.nanoTime() - t0;
                    if (rep > 0) {
                        ns.add((double) dt / n);
                    }
                }
                out.put("ns", ns);
                break;
            }
            case "framework":
                return jmh(req);
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
        return out;
    }

    /** One cell under JMH: warm-up, then reps iterations of seconds each, one fork. */
    private Map<String, Object> jmh(Map<String, Object> req) throws Exception {
        Map<String, Object> job = new LinkedHashMap<>(req);
        job.put("lib", lib);
        if (!"keygen".equals(req.get("what"))) {
            Map<String, Object> load = loads.get(String.valueOf(req.get("key")));
            if (load == null) {
                throw new IllegalArgumentException("unknown key " + req.get("key"));
            }
            for (String f : new String[] {"pem", "variant", "n", "e", "d"}) {
                if (load.containsKey(f)) {
                    job.put(f, load.get(f));
                }
            }
        }
        Path file = Files.createTempFile("crossbench-jmh", ".json");
        try {
            Files.write(file, Json.write(job).getBytes(StandardCharsets.UTF_8));
            double seconds = req.get("seconds") instanceof Double ? (Double) req.get("seconds") : 1.0;
            TimeValue t = TimeValue.milliseconds(Math.max(10, (long) (seconds * 1000)));
            Options opts = new OptionsBuilder()
                    .include(Cell.class.getName() + ".run")
                    .param("job", file.toString())
                    .forks(1)
                    .warmupIterations(1)
                    .warmupTime(t)
                    .measurementIterations(Math.max(2, num(req, "reps", 5)))
                    .measurementTime(t)
                    .shouldFailOnError(true)
                    .build();
            PrintStream quiet = new PrintStream(OutputStream.nullOutputStream());
            Collection<RunResult> runs =
                    new Runner(opts, OutputFormatFactory.createFormatInstance(quiet, VerboseMode.SILENT)).run();
            if (runs.isEmpty()) {
                throw new IllegalStateException("JMH returned no result");
            }
            RunResult r = runs.iterator().next();
            Statistics st = r.getPrimaryResult().getStatistics();
            long ops = 0;
            for (var b : r.getBenchmarkResults()) {
                for (IterationResult it : b.getIterationResults()) {
                    ops += it.getMetadata().getMeasuredOps();
                }
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("framework", "JMH 1.37");
            out.put("mean_ns", st.getMean());
            out.put("sd_ns", st.getN() > 1 ? st.getStandardDeviation() : 0.0);
            out.put("median_ns", st.getPercentile(50));
            out.put("samples", st.getN());
            out.put("iterations", ops);
            return out;
        } finally {
            Files.deleteIfExists(file);
        }
    }

    public static void main(String[] args) throws Exception {
        String lib = args.length == 2 && args[0].equals("--lib") ? args[1] : null;
        if (lib == null || !(lib.equals("jca") || lib.equals("bc"))) {
            System.err.println("usage: crossbench.Adapter --lib jca|bc");
            System.exit(2);
        }
        Adapter a = new Adapter(lib);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, "UTF-8");
        // JMH and providers may print; only replies go to the protocol's stdout.
        System.setOut(System.err);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            Map<String, Object> reply;
            try {
                Map<String, Object> req = Json.parse(line);
                if ("quit".equals(req.get("op"))) {
                    break;
                }
                reply = a.handle(req);
                reply.put("ok", true);
            } catch (Exception | Error e) {
                reply = new LinkedHashMap<>();
                reply.put("ok", false);
                String msg = e.getMessage();
                reply.put("error", e.getClass().getSimpleName() + (msg == null ? "" : ": " + msg));
            }
            out.println(Json.write(reply));
            out.flush();
        }
    }
}
