package crossbench;

import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;

/** The JMH benchmark of one cell; its job (a file) is the framework request. */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class Cell {
    /** Path of a file holding the request line, with the key's load fields. */
    @Param("")
    public String job;

    private Rsa.Op op;

    @Setup
    public void setup() throws Exception {
        Map<String, Object> req = Json.parse(new String(Files.readAllBytes(Paths.get(job)), "UTF-8"));
        String lib = req.get("lib").toString();
        Rsa key = req.containsKey("pem") ? new Rsa(lib, req) : null;
        op = Rsa.prepare(lib, key, req);
    }

    @Benchmark
    public Object run() throws Exception {
        return op.call();
    }
}
