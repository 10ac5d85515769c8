/*
 * KafkaOracle: a small command-line test tool that asks a real Kafka broker (through the Java
 * clients of Apache Kafka 4.1.1) for the answers a Kafka-compatible implementation must give.
 *
 * Build: javac -cp 'build/real-kafka/libs/*' -d OUT KafkaOracle.java
 * Run:   java -Xmx256m -cp 'build/real-kafka/libs/*:OUT' KafkaOracle <command> <bootstrap> [args...]
 *
 *   consume  <bootstrap> <topic> <read_committed|read_uncommitted> <out.ndjson>
 *   offsets  <bootstrap> <topic> <out.json> [timestamp...]
 *   rlmm     <bootstrap> <out.ndjson>
 *   produce  <bootstrap> <topic> <spec.json>          (prints {"sent": n} on stdout)
 *   serve    one command a line on stdin (a JSON array of its arguments), each answered on
 *            stdout by its output and then "KafkaOracle done <exit code> <message>"; the JVM's
 *            start is paid once (tests/realkafka/java.py). Ends at the end of stdin.
 *
 * Output files are written to "<path>.tmp" and renamed into place only on success. Everything
 * else (client logging, progress) goes to stderr: System.out is redirected to stderr at start,
 * so the only thing on the real stdout is the JSON that "produce" prints.
 *
 * Every command has an overall deadline (120 s by default; the system property
 * oracle.timeout.s or the environment variable ORACLE_TIMEOUT_S changes it). A watchdog halts
 * the JVM with exit code 3 when the deadline passes. Exit codes: 0 success, 1 failure,
 * 2 usage error, 3 timeout.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde;
import org.apache.kafka.server.log.remote.storage.RemoteLogMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadataUpdate;
import org.apache.kafka.server.log.remote.storage.RemotePartitionDeleteMetadata;

public class KafkaOracle {

    static final long DEFAULT_TIMEOUT_S = 120;
    static final String RLMM_TOPIC = "__remote_log_metadata";
    static final ObjectMapper JSON = new ObjectMapper();
    static final Base64.Encoder B64 = Base64.getEncoder();
    static final Base64.Decoder B64D = Base64.getDecoder();

    /** The real stdout; System.out is pointed at stderr so that client logging never lands here. */
    static PrintStream stdout;
    static volatile long deadlineNanos;
    /** A server's deadline between commands. */
    static final long IDLE_NANOS = TimeUnit.DAYS.toNanos(1);

    /** A failure with a message for the user (exit code 1). */
    static final class OracleException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        OracleException(String message) {
            super(message);
        }
    }

    /** A wrong command line (exit code 2). */
    static final class UsageException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    static final String USAGE = String.join("\n",
        "usage: KafkaOracle <command> <bootstrap> [args...]",
        "  consume <bootstrap> <topic> <read_committed|read_uncommitted> <out.ndjson>",
        "  offsets <bootstrap> <topic> <out.json> [timestamp...]",
        "  rlmm    <bootstrap> <out.ndjson>",
        "  produce <bootstrap> <topic> <spec.json>",
        "  serve   (commands as JSON arrays, one a line on stdin)",
        "overall timeout: -Doracle.timeout.s=N or ORACLE_TIMEOUT_S=N (default " + DEFAULT_TIMEOUT_S + ")");

    public static void main(String[] args) {
        stdout = System.out;
        System.setOut(System.err);
        long timeoutS = timeoutSeconds();
        if (args.length == 1 && args[0].equals("serve")) {
            serve(timeoutS);
            return;
        }
        deadlineNanos = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutS);
        startWatchdog(timeoutS);
        int code = attempt(args).code();
        stdout.flush();
        System.err.flush();
        // halt: no client thread or logging shutdown hook can hold the exit up.
        Runtime.getRuntime().halt(code);
    }

    /** Commands from stdin until its end, each with the overall deadline of one run. */
    static void serve(long timeoutS) {
        deadlineNanos = System.nanoTime() + IDLE_NANOS;
        startWatchdog(timeoutS);
        int last = 0;
        try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                deadlineNanos = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutS);
                Outcome outcome;
                try {
                    outcome = attempt(JSON.readValue(line, String[].class));
                } catch (IOException e) {
                    outcome = new Outcome(2, "not a JSON array of strings: " + describe(e));
                }
                deadlineNanos = System.nanoTime() + IDLE_NANOS;
                System.err.flush();
                stdout.println("KafkaOracle done " + outcome.code() + " " + outcome.message().replace('\n', ' '));
                stdout.flush();
                last = outcome.code();
            }
        } catch (IOException e) {
            last = 1;
        }
        Runtime.getRuntime().halt(last == 0 ? 0 : 1);
    }

    /** How one command ended: its exit code (0, 1, or 2 for a wrong command line) and why. */
    record Outcome(int code, String message) {}

    /** One command; a failure is told on stderr too. */
    static Outcome attempt(String[] args) {
        try {
            run(args);
            return new Outcome(0, "");
        } catch (UsageException e) {
            System.err.println("KafkaOracle: " + e.getMessage());
            System.err.println(USAGE);
            return new Outcome(2, e.getMessage());
        } catch (Throwable e) {
            System.err.println("KafkaOracle: FAILED: " + describe(e));
            e.printStackTrace(System.err);
            return new Outcome(1, describe(e));
        }
    }

    static void run(String[] args) throws Exception {
        if (args.length < 2) {
            throw new UsageException("missing command or bootstrap");
        }
        String command = args[0];
        String bootstrap = args[1];
        switch (command) {
            case "consume":
                if (args.length != 5) {
                    throw new UsageException("consume takes <bootstrap> <topic> <isolation> <out.ndjson>");
                }
                consume(bootstrap, args[2], isolation(args[3]), Paths.get(args[4]));
                break;
            case "offsets": {
                if (args.length < 4) {
                    throw new UsageException("offsets takes <bootstrap> <topic> <out.json> [timestamp...]");
                }
                List<Long> timestamps = new ArrayList<>();
                for (int i = 4; i < args.length; i++) {
                    long ts;
                    try {
                        ts = Long.parseLong(args[i]);
                    } catch (NumberFormatException e) {
                        throw new UsageException("not a timestamp: " + args[i]);
                    }
                    if (ts < 0) {
                        throw new UsageException("timestamps must be >= 0: " + args[i]);
                    }
                    timestamps.add(ts);
                }
                offsets(bootstrap, args[2], Paths.get(args[3]), timestamps);
                break;
            }
            case "rlmm":
                if (args.length != 3) {
                    throw new UsageException("rlmm takes <bootstrap> <out.ndjson>");
                }
                rlmm(bootstrap, Paths.get(args[2]));
                break;
            case "produce":
                if (args.length != 4) {
                    throw new UsageException("produce takes <bootstrap> <topic> <spec.json>");
                }
                produce(bootstrap, args[2], Paths.get(args[3]));
                break;
            default:
                throw new UsageException("unknown command: " + command);
        }
    }

    // ------------------------------------------------------------------ deadline

    static long timeoutSeconds() {
        String value = System.getProperty("oracle.timeout.s");
        if (value == null || value.isBlank()) {
            value = System.getenv("ORACLE_TIMEOUT_S");
        }
        if (value == null || value.isBlank()) {
            return DEFAULT_TIMEOUT_S;
        }
        try {
            long s = Long.parseLong(value.trim());
            if (s <= 0) {
                throw new NumberFormatException();
            }
            return s;
        } catch (NumberFormatException e) {
            System.err.println("KafkaOracle: bad timeout '" + value + "', using " + DEFAULT_TIMEOUT_S + " s");
            return DEFAULT_TIMEOUT_S;
        }
    }

    static void startWatchdog(long timeoutS) {
        Thread watchdog = new Thread(() -> {
            try {
                long left;
                while ((left = deadlineNanos - System.nanoTime()) > 0) {
                    // a server moves the deadline with each command: look again every second
                    TimeUnit.NANOSECONDS.sleep(Math.min(left, TimeUnit.SECONDS.toNanos(1)));
                }
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("KafkaOracle: FAILED: overall timeout of " + timeoutS + " s exceeded");
            System.err.flush();
            Runtime.getRuntime().halt(3);
        }, "oracle-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
    }

    /** Time left before the deadline, at least 1 ms. */
    static long remainingMs() {
        long left = TimeUnit.NANOSECONDS.toMillis(deadlineNanos - System.nanoTime());
        if (left <= 0) {
            throw new OracleException("overall timeout exceeded");
        }
        return left;
    }

    static Duration remaining() {
        return Duration.ofMillis(remainingMs());
    }

    static <T> T await(Future<T> future, String what) throws Exception {
        try {
            return future.get(remainingMs(), TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            throw new OracleException(what + ": timed out");
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            throw new OracleException(what + ": " + describe(cause));
        }
    }

    static String describe(Throwable e) {
        StringBuilder text = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (text.length() > 0) {
                text.append(" <- ");
            }
            text.append(t.getClass().getSimpleName());
            if (t.getMessage() != null) {
                text.append(": ").append(t.getMessage());
            }
        }
        return text.toString();
    }

    // ------------------------------------------------------------------ helpers

    static IsolationLevel isolation(String name) {
        switch (name) {
            case "read_committed":
                return IsolationLevel.READ_COMMITTED;
            case "read_uncommitted":
                return IsolationLevel.READ_UNCOMMITTED;
            default:
                throw new UsageException("isolation must be read_committed or read_uncommitted, not " + name);
        }
    }

    static String b64(byte[] bytes) {
        return bytes == null ? null : B64.encodeToString(bytes);
    }

    static byte[] unb64(JsonNode node, String what) {
        if (node == null || node.isNull()) {
            return null;
        }
        if (!node.isTextual()) {
            throw new OracleException(what + " must be a base64 string or null");
        }
        try {
            return B64D.decode(node.asText());
        } catch (IllegalArgumentException e) {
            throw new OracleException(what + " is not valid base64: " + e.getMessage());
        }
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, IsolationLevel isolation) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation.toString());
        props.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "8388608");
        props.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, "52428800");
        props.put(ConsumerConfig.CHECK_CRCS_CONFIG, "true");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "kafka-oracle-" + isolation.toString());
        return new KafkaConsumer<>(props);
    }

    static Admin admin(String bootstrap) {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "kafka-oracle-admin");
        return Admin.create(props);
    }

    /** All partitions of the topic, ascending; fails when the topic has none (or is unknown). */
    static List<TopicPartition> partitions(KafkaConsumer<?, ?> consumer, String topic) {
        List<PartitionInfo> infos;
        try {
            infos = consumer.partitionsFor(topic, remaining());
        } catch (org.apache.kafka.common.errors.TimeoutException e) {
            throw new OracleException("no metadata for topic " + topic + ": " + describe(e));
        }
        if (infos == null || infos.isEmpty()) {
            throw new OracleException("topic " + topic + " does not exist or has no partitions");
        }
        List<TopicPartition> result = new ArrayList<>();
        for (PartitionInfo info : infos) {
            result.add(new TopicPartition(info.topic(), info.partition()));
        }
        result.sort(Comparator.comparingInt(TopicPartition::partition));
        return result;
    }

    interface RecordSink {
        void accept(ConsumerRecord<byte[], byte[]> record) throws IOException;
    }

    /**
     * Reads every partition of the topic from its beginning offset to the end offset (as seen at
     * the start, honouring the consumer's isolation level), partition by partition in ascending
     * order, handing records (offset ascending) to the sink. Records at or past the end offset
     * (produced meanwhile) are left out.
     */
    static long readAll(KafkaConsumer<byte[], byte[]> consumer, String topic, RecordSink sink) throws IOException {
        List<TopicPartition> partitions = partitions(consumer, topic);
        consumer.assign(partitions);
        consumer.seekToBeginning(partitions);
        Map<TopicPartition, Long> ends = consumer.endOffsets(partitions, remaining());
        Map<TopicPartition, Long> begins = consumer.beginningOffsets(partitions, remaining());
        long count = 0;
        for (TopicPartition tp : partitions) {
            long end = ends.get(tp);
            System.err.printf("KafkaOracle: %s: reading [%d, %d)%n", tp, begins.get(tp), end);
            if (consumer.position(tp, remaining()) >= end) {
                continue;
            }
            // Fetch only this partition so that records come out in (partition, offset) order
            // without buffering the whole topic.
            List<TopicPartition> others = new ArrayList<>(partitions);
            others.remove(tp);
            consumer.pause(others);
            consumer.resume(List.of(tp));
            long lastOffset = -1;
            while (consumer.position(tp, remaining()) < end) {
                ConsumerRecords<byte[], byte[]> records =
                    consumer.poll(Duration.ofMillis(Math.min(500, remainingMs())));
                for (ConsumerRecord<byte[], byte[]> record : records.records(tp)) {
                    if (record.offset() >= end) {
                        continue;
                    }
                    if (record.offset() <= lastOffset) {
                        throw new OracleException(tp + ": offsets out of order: " + record.offset()
                            + " after " + lastOffset);
                    }
                    lastOffset = record.offset();
                    sink.accept(record);
                    count++;
                }
                for (TopicPartition other : records.partitions()) {
                    if (!other.equals(tp)) {
                        throw new OracleException("records of paused partition " + other);
                    }
                }
            }
        }
        return count;
    }

    static Path tmpPath(Path out) {
        return out.resolveSibling(out.getFileName().toString() + ".tmp");
    }

    static void publish(Path tmp, Path out) throws IOException {
        try {
            Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException e) {
            Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING);
        }
    }

    static void writeJson(Path out, JsonNode node) throws IOException {
        Path tmp = tmpPath(out);
        Files.write(tmp, (JSON.writeValueAsString(node) + "\n").getBytes(StandardCharsets.UTF_8));
        publish(tmp, out);
    }

    static ObjectNode epochNode(ObjectNode node, Optional<Integer> epoch) {
        if (epoch.isPresent()) {
            node.put("leaderEpoch", epoch.get());
        } else {
            node.putNull("leaderEpoch");
        }
        return node;
    }

    // ------------------------------------------------------------------ consume

    static void consume(String bootstrap, String topic, IsolationLevel isolation, Path out) throws Exception {
        Path tmp = tmpPath(out);
        long count;
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, isolation);
             BufferedWriter writer = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8)) {
            count = readAll(consumer, topic, record -> {
                writer.write(JSON.writeValueAsString(recordJson(record)));
                writer.write('\n');
            });
            consumer.close(CloseOptions.timeout(Duration.ofMillis(Math.min(5000, remainingMs()))));
        }
        publish(tmp, out);
        System.err.println("KafkaOracle: consumed " + count + " records of " + topic + " (" + isolation + ")");
    }

    static ObjectNode recordJson(ConsumerRecord<byte[], byte[]> record) {
        ObjectNode node = JSON.createObjectNode();
        node.put("partition", record.partition());
        node.put("offset", record.offset());
        node.put("timestamp", record.timestamp());
        TimestampType type = record.timestampType();
        node.put("timestampType", type == null ? null : type.name);
        node.put("key", b64(record.key()));
        node.put("value", b64(record.value()));
        ArrayNode headers = node.putArray("headers");
        for (Header header : record.headers()) {
            ArrayNode pair = headers.addArray();
            pair.add(header.key());
            pair.add(b64(header.value()));
        }
        return epochNode(node, record.leaderEpoch());
    }

    // ------------------------------------------------------------------ offsets

    static void offsets(String bootstrap, String topic, Path out, List<Long> timestamps) throws Exception {
        ObjectNode root = JSON.createObjectNode();
        ObjectNode partitionsNode = root.putObject("partitions");
        ObjectNode adminNode = root.putObject("admin");
        List<TopicPartition> partitions;
        try (KafkaConsumer<byte[], byte[]> uncommitted = consumer(bootstrap, IsolationLevel.READ_UNCOMMITTED);
             KafkaConsumer<byte[], byte[]> committed = consumer(bootstrap, IsolationLevel.READ_COMMITTED)) {
            partitions = partitions(uncommitted, topic);
            Map<TopicPartition, Long> begins = uncommitted.beginningOffsets(partitions, remaining());
            Map<TopicPartition, Long> endsU = uncommitted.endOffsets(partitions, remaining());
            Map<TopicPartition, Long> endsC = committed.endOffsets(partitions, remaining());
            Map<Long, Map<TopicPartition, OffsetAndTimestamp>> timesU = new LinkedHashMap<>();
            Map<Long, Map<TopicPartition, OffsetAndTimestamp>> timesC = new LinkedHashMap<>();
            for (long ts : timestamps) {
                Map<TopicPartition, Long> query = new HashMap<>();
                for (TopicPartition tp : partitions) {
                    query.put(tp, ts);
                }
                timesU.put(ts, uncommitted.offsetsForTimes(query, remaining()));
                timesC.put(ts, committed.offsetsForTimes(query, remaining()));
            }
            for (TopicPartition tp : partitions) {
                ObjectNode p = partitionsNode.putObject(Integer.toString(tp.partition()));
                p.put("beginning", begins.get(tp));
                p.put("end_uncommitted", endsU.get(tp));
                p.put("end_committed", endsC.get(tp));
                p.set("times", timesJson(timesU, tp));
                p.set("times_committed", timesJson(timesC, tp));
            }
        }
        try (Admin admin = admin(bootstrap)) {
            Map<String, Map<TopicPartition, ListOffsetsResultInfo>> answers = new LinkedHashMap<>();
            answers.put("earliest", listOffsets(admin, partitions, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED));
            answers.put("latest_uncommitted", listOffsets(admin, partitions, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED));
            answers.put("latest_committed", listOffsets(admin, partitions, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED));
            answers.put("max_timestamp", listOffsets(admin, partitions, OffsetSpec.maxTimestamp(), IsolationLevel.READ_UNCOMMITTED));
            answers.put("earliest_local", listOffsets(admin, partitions, OffsetSpec.earliestLocal(), IsolationLevel.READ_UNCOMMITTED));
            answers.put("latest_tiered", listOffsets(admin, partitions, OffsetSpec.latestTiered(), IsolationLevel.READ_UNCOMMITTED));
            for (TopicPartition tp : partitions) {
                ObjectNode p = adminNode.putObject(Integer.toString(tp.partition()));
                for (Map.Entry<String, Map<TopicPartition, ListOffsetsResultInfo>> answer : answers.entrySet()) {
                    ListOffsetsResultInfo info = answer.getValue().get(tp);
                    if (info == null) {
                        p.putNull(answer.getKey());
                        continue;
                    }
                    ObjectNode i = p.putObject(answer.getKey());
                    i.put("offset", info.offset());
                    i.put("timestamp", info.timestamp());
                    epochNode(i, info.leaderEpoch());
                }
            }
            admin.close(Duration.ofMillis(Math.min(5000, remainingMs())));
        }
        writeJson(out, root);
        System.err.println("KafkaOracle: offsets of " + partitions.size() + " partitions of " + topic + " written");
    }

    static ObjectNode timesJson(Map<Long, Map<TopicPartition, OffsetAndTimestamp>> times, TopicPartition tp) {
        ObjectNode node = JSON.createObjectNode();
        for (Map.Entry<Long, Map<TopicPartition, OffsetAndTimestamp>> entry : times.entrySet()) {
            OffsetAndTimestamp found = entry.getValue().get(tp);
            String key = Long.toString(entry.getKey());
            if (found == null) {
                node.putNull(key);
            } else {
                ObjectNode f = node.putObject(key);
                f.put("offset", found.offset());
                f.put("timestamp", found.timestamp());
                epochNode(f, found.leaderEpoch());
            }
        }
        return node;
    }

    static Map<TopicPartition, ListOffsetsResultInfo> listOffsets(Admin admin, List<TopicPartition> partitions,
                                                                  OffsetSpec spec, IsolationLevel isolation) throws Exception {
        Map<TopicPartition, OffsetSpec> query = new LinkedHashMap<>();
        for (TopicPartition tp : partitions) {
            query.put(tp, spec);
        }
        ListOffsetsOptions options = new ListOffsetsOptions(isolation);
        options.timeoutMs((int) Math.min(Integer.MAX_VALUE, remainingMs()));
        return await(admin.listOffsets(query, options).all(),
            "Admin.listOffsets(" + spec.getClass().getSimpleName() + ", " + isolation + ")");
    }

    // ------------------------------------------------------------------ rlmm

    static void rlmm(String bootstrap, Path out) throws Exception {
        Path tmp = tmpPath(out);
        RemoteLogMetadataSerde serde = new RemoteLogMetadataSerde();
        long count;
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, IsolationLevel.READ_UNCOMMITTED);
             BufferedWriter writer = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8)) {
            count = readAll(consumer, RLMM_TOPIC, record -> {
                ObjectNode node;
                if (record.value() == null) {
                    node = JSON.createObjectNode();
                    node.putNull("type");
                } else {
                    try {
                        node = metadataJson(serde.deserialize(record.value()));
                    } catch (RuntimeException e) {
                        throw new OracleException("cannot deserialize " + RLMM_TOPIC + " record at partition "
                            + record.partition() + " offset " + record.offset() + ": " + describe(e));
                    }
                }
                writer.write(JSON.writeValueAsString(node));
                writer.write('\n');
            });
            consumer.close(CloseOptions.timeout(Duration.ofMillis(Math.min(5000, remainingMs()))));
        }
        publish(tmp, out);
        System.err.println("KafkaOracle: " + count + " remote log metadata records written");
    }

    static void putTopicIdPartition(ObjectNode node, TopicIdPartition tip) {
        node.put("topicId", tip.topicId().toString());
        node.put("topic", tip.topic());
        node.put("partition", tip.partition());
    }

    static void putCustomMetadata(ObjectNode node, Optional<RemoteLogSegmentMetadata.CustomMetadata> custom) {
        node.put("customMetadata", custom.isPresent() ? b64(custom.get().value()) : null);
    }

    static ObjectNode metadataJson(RemoteLogMetadata metadata) {
        ObjectNode node = JSON.createObjectNode();
        node.put("type", metadata.getClass().getSimpleName());
        if (metadata instanceof RemoteLogSegmentMetadata) {
            RemoteLogSegmentMetadata m = (RemoteLogSegmentMetadata) metadata;
            putTopicIdPartition(node, m.remoteLogSegmentId().topicIdPartition());
            node.put("segmentId", m.remoteLogSegmentId().id().toString());
            node.put("startOffset", m.startOffset());
            node.put("endOffset", m.endOffset());
            node.put("maxTimestampMs", m.maxTimestampMs());
            node.put("eventTimestampMs", m.eventTimestampMs());
            node.put("brokerId", m.brokerId());
            node.put("segmentSizeInBytes", m.segmentSizeInBytes());
            node.put("state", m.state().name());
            ObjectNode epochs = node.putObject("segmentLeaderEpochs");
            for (Map.Entry<Integer, Long> e : m.segmentLeaderEpochs().entrySet()) {
                epochs.put(Integer.toString(e.getKey()), e.getValue());
            }
            putCustomMetadata(node, m.customMetadata());
            node.put("txnIdxEmpty", m.isTxnIdxEmpty());
        } else if (metadata instanceof RemoteLogSegmentMetadataUpdate) {
            RemoteLogSegmentMetadataUpdate m = (RemoteLogSegmentMetadataUpdate) metadata;
            putTopicIdPartition(node, m.remoteLogSegmentId().topicIdPartition());
            node.put("segmentId", m.remoteLogSegmentId().id().toString());
            node.put("state", m.state().name());
            node.put("eventTimestampMs", m.eventTimestampMs());
            node.put("brokerId", m.brokerId());
            putCustomMetadata(node, m.customMetadata());
        } else if (metadata instanceof RemotePartitionDeleteMetadata) {
            RemotePartitionDeleteMetadata m = (RemotePartitionDeleteMetadata) metadata;
            putTopicIdPartition(node, m.topicIdPartition());
            node.put("state", m.state().name());
            node.put("eventTimestampMs", m.eventTimestampMs());
            node.put("brokerId", m.brokerId());
        } else {
            putTopicIdPartition(node, metadata.topicIdPartition());
            node.put("eventTimestampMs", metadata.eventTimestampMs());
            node.put("brokerId", metadata.brokerId());
            node.put("text", metadata.toString());
        }
        return node;
    }

    // ------------------------------------------------------------------ produce

    static void produce(String bootstrap, String topic, Path specPath) throws Exception {
        JsonNode spec;
        try {
            spec = JSON.readTree(specPath.toFile());
        } catch (IOException e) {
            throw new OracleException("cannot read spec " + specPath + ": " + e.getMessage());
        }
        if (spec == null || !spec.isObject()) {
            throw new OracleException("spec must be a JSON object");
        }
        Properties props = new Properties();
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        JsonNode config = spec.path("config");
        if (!config.isMissingNode() && !config.isNull()) {
            if (!config.isObject()) {
                throw new OracleException("spec.config must be an object");
            }
            for (Map.Entry<String, JsonNode> entry : config.properties()) {
                if (!entry.getValue().isNull()) {
                    props.put(entry.getKey(), entry.getValue().asText());
                }
            }
        }
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        boolean transactional = props.getProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG) != null;
        JsonNode steps = spec.path("steps");
        if (!steps.isArray()) {
            throw new OracleException("spec.steps must be an array");
        }

        List<Future<RecordMetadata>> pending = new ArrayList<>();
        long sent = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            if (transactional) {
                producer.initTransactions();
            }
            int index = 0;
            for (JsonNode step : steps) {
                String where = "step " + index++;
                String op = step.path("op").asText("");
                switch (op) {
                    case "send": {
                        JsonNode p = step.get("partition");
                        Integer partition = p == null || p.isNull() ? null : p.asInt();
                        JsonNode t = step.get("timestamp");
                        Long timestamp = t == null || t.isNull() ? null : t.asLong();
                        byte[] key = unb64(step.get("key"), where + ".key");
                        byte[] value = unb64(step.get("value"), where + ".value");
                        RecordHeaders headers = new RecordHeaders();
                        JsonNode hs = step.get("headers");
                        if (hs != null && !hs.isNull()) {
                            if (!hs.isArray()) {
                                throw new OracleException(where + ".headers must be an array");
                            }
                            for (JsonNode h : hs) {
                                if (!h.isArray() || h.size() != 2 || !h.get(0).isTextual()) {
                                    throw new OracleException(where + ".headers entries must be [name, base64-or-null]");
                                }
                                headers.add(new RecordHeader(h.get(0).asText(), unb64(h.get(1), where + ".header")));
                            }
                        }
                        pending.add(producer.send(new ProducerRecord<>(topic, partition, timestamp, key, value, headers)));
                        sent++;
                        break;
                    }
                    case "flush":
                        producer.flush();
                        checkSends(pending);
                        break;
                    case "begin":
                        requireTransactional(transactional, where, op);
                        producer.beginTransaction();
                        break;
                    case "commit":
                        requireTransactional(transactional, where, op);
                        producer.commitTransaction();  // bounded by max.block.ms
                        checkSends(pending);
                        break;
                    case "abort":
                        requireTransactional(transactional, where, op);
                        // flush first, so that the records are written (and then aborted) rather
                        // than dropped in the client with TransactionAbortedException.
                        producer.flush();
                        checkSends(pending);
                        producer.abortTransaction();
                        break;
                    case "sleep": {
                        long ms = step.path("ms").asLong(0);
                        if (ms > 0) {
                            Thread.sleep(Math.min(ms, remainingMs()));
                        }
                        break;
                    }
                    default:
                        throw new OracleException(where + ": unknown op '" + op + "'");
                }
                remainingMs();
            }
            producer.flush();
            checkSends(pending);
            producer.close(Duration.ofMillis(Math.min(10000, remainingMs())));
        }
        ObjectNode result = JSON.createObjectNode();
        result.put("sent", sent);
        stdout.println(JSON.writeValueAsString(result));
        stdout.flush();
        System.err.println("KafkaOracle: sent " + sent + " records to " + topic);
    }

    static void requireTransactional(boolean transactional, String where, String op) {
        if (!transactional) {
            throw new OracleException(where + ": '" + op + "' needs transactional.id in spec.config");
        }
    }

    static void checkSends(List<Future<RecordMetadata>> pending) throws Exception {
        for (Future<RecordMetadata> future : pending) {
            await(future, "send");
        }
        pending.clear();
    }
}
