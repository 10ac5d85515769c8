/*
 * Kafka's own reading of record batches, for the decoders' cross-check (issue 33): every case
 * of a file (a 4-byte big-endian length, then that many bytes) read as the Java consumer reads
 * a fetched batch (the CRC checked, then every record), one JSON line per case:
 * {"records": [[offset, timestamp, key, value, [[header key, header value], ...]], ...]} with
 * bytes in base64 (null stays null), or {"error": "<exception class>"}.
 */
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Base64;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.MutableRecordBatch;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.utils.Utils;

public final class RecordReader {
    private static final Base64.Encoder B64 = Base64.getEncoder();

    private RecordReader() {
    }

    private static String bytes(ByteBuffer buffer) {
        return buffer == null ? null : B64.encodeToString(Utils.toArray(buffer));
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        ByteBuffer all = ByteBuffer.wrap(Files.readAllBytes(Paths.get(args[0])));
        StringBuilder out = new StringBuilder();
        while (all.remaining() >= 4) {
            int size = all.getInt();
            ByteBuffer one = all.slice();
            one.limit(size);
            all.position(all.position() + size);
            ObjectNode line = json.createObjectNode();
            ArrayNode records = line.putArray("records");
            try {
                for (MutableRecordBatch batch : MemoryRecords.readableRecords(one).batches()) {
                    batch.ensureValid();
                    for (Record r : batch) {
                        ArrayNode row = records.addArray();
                        row.add(r.offset());
                        row.add(r.timestamp());
                        row.add(r.hasKey() ? bytes(r.key()) : null);
                        row.add(r.hasValue() ? bytes(r.value()) : null);
                        ArrayNode headers = row.addArray();
                        for (Header h : r.headers()) {
                            ArrayNode pair = headers.addArray();
                            pair.add(h.key());
                            pair.add(h.value() == null ? null : B64.encodeToString(h.value()));
                        }
                    }
                }
            } catch (RuntimeException e) {
                line.removeAll();
                line.put("error", e.getClass().getName());
            }
            out.append(json.writeValueAsString(line)).append('\n');
        }
        System.out.print(out);
    }
}
