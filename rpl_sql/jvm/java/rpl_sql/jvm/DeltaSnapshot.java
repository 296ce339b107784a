package rpl_sql.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.hadoop.ParquetReader;
import org.apache.parquet.hadoop.example.GroupReadSupport;

/**
 * The live files of a Delta table at its latest version, read from its log without Delta Lake: the newest
 * checkpoint (Parquet) and the JSON commits after it. One immutable object per version; {@link #latest} keeps
 * the last one per table and reads only the commits written since, so a query pays for what changed.
 *
 * <p>A table this cannot read exactly (column mapping, a reader feature it does not know) is refused with an error
 * rather than read wrong; deletion vectors are handed to the scan ({@link ReplicaParquetFormat}).
 */
public final class DeltaSnapshot {
  /**
   * One live data file: its absolute path, size, modification time, its statistics (JSON, or null) and its
   * deletion vector (or null).
   */
  public static final class AddFile {
    public final Path path;
    public final long size;
    public final long modificationTime;
    public final String stats;
    public final DeletionVector deletionVector;

    AddFile(Path path, long size, long modificationTime, String stats, DeletionVector deletionVector) {
      this.path = path;
      this.size = size;
      this.modificationTime = modificationTime;
      this.stats = stats;
      this.deletionVector = deletionVector;
    }
  }

  /** A live file's key: its path as written and its deletion vector's id (the protocol's file identity). */
  private static String key(String raw, DeletionVector dv) {
    return dv == null ? raw : raw + "\n" + dv.uniqueId();
  }

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<String, DeltaSnapshot> LATEST = new ConcurrentHashMap<>();
  private static final java.util.Set<String> READABLE_FEATURES = java.util.Set.of(
      "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck", "domainMetadata", "checkpointProtection",
      "deletionVectors", "variantType");

  public final Path table;
  public final long version;
  public final String schemaString;
  private final Map<String, AddFile> files; // key(path as written, deletion vector) -> the file

  private DeltaSnapshot(Path table, long version, String schemaString, Map<String, AddFile> files) {
    this.table = table;
    this.version = version;
    this.schemaString = schemaString;
    this.files = files;
  }

  public List<AddFile> files() {
    return Collections.unmodifiableList(new ArrayList<>(files.values()));
  }

  public long sizeInBytes() {
    long n = 0;
    for (AddFile f : files.values()) n += f.size;
    return n;
  }

  /** The table at its newest version, from the one this process read last when it can still be followed. */
  public static DeltaSnapshot latest(Path table, Configuration conf) throws IOException {
    String key = table.toString();
    for (int attempt = 0; ; attempt++) {
      DeltaSnapshot known = LATEST.get(key);
      try {
        DeltaSnapshot now = read(table, conf, known);
        LATEST.put(key, now);
        return now;
      } catch (FileNotFoundException | GapException e) {
        // a commit moved to the archive or a checkpoint replaced between a listing and a read: read again
        LATEST.remove(key);
        if (attempt >= 3) throw new IOException("rpl_sql: the Delta log of " + table + " kept changing: " + e, e);
      }
    }
  }

  private static final class GapException extends IOException {
    GapException(String m) {
      super(m);
    }
  }

  private static DeltaSnapshot read(Path table, Configuration conf, DeltaSnapshot known) throws IOException {
    Path log = new Path(table, "_delta_log");
    FileSystem fs = log.getFileSystem(conf);
    TreeMap<Long, Path> commits = new TreeMap<>();
    TreeMap<Long, List<Path>> checkpoints = new TreeMap<>();
    FileStatus[] listed;
    try {
      listed = fs.listStatus(log);
    } catch (FileNotFoundException e) {
      throw new IOException("rpl_sql: " + table + " is not a Delta table (no _delta_log)", e);
    }
    for (FileStatus st : listed) {
      String name = st.getPath().getName();
      if (name.length() < 21 || !Character.isDigit(name.charAt(0))) continue;
      long v;
      try {
        v = Long.parseLong(name.substring(0, 20));
      } catch (NumberFormatException e) {
        continue;
      }
      if (name.endsWith(".json") && name.length() == 25) commits.put(v, st.getPath());
      else if (name.contains(".checkpoint") && name.endsWith(".parquet"))
        checkpoints.computeIfAbsent(v, k -> new ArrayList<>()).add(st.getPath());
    }
    long newest = Math.max(commits.isEmpty() ? -1 : commits.lastKey(), checkpoints.isEmpty() ? -1 : checkpoints.lastKey());
    if (newest < 0) throw new IOException("rpl_sql: " + table + " has no Delta commits yet");
    if (known != null && known.version == newest) return known;

    String schema;
    Map<String, AddFile> files;
    long from;
    if (known != null && known.version < newest && commits.containsKey(known.version + 1)) {
      schema = known.schemaString;
      files = new LinkedHashMap<>(known.files);
      from = known.version + 1;
    } else {
      Map.Entry<Long, List<Path>> cp = null;
      for (Map.Entry<Long, List<Path>> e : checkpoints.descendingMap().entrySet()) {
        if (isComplete(e.getValue())) {
          cp = e;
          break;
        }
      }
      files = new LinkedHashMap<>();
      String[] schemaBox = {null};
      if (cp != null) {
        for (Path part : cp.getValue()) readCheckpoint(part, conf, table, files, schemaBox);
        from = cp.getKey() + 1;
      } else {
        from = 0;
      }
      schema = schemaBox[0];
    }
    for (long v = from; v <= newest; v++) {
      Path commit = commits.get(v);
      if (commit == null) throw new GapException("commit " + v + " of " + table + " is not in _delta_log");
      String[] schemaBox = {schema};
      readCommit(fs, commit, table, files, schemaBox);
      schema = schemaBox[0];
    }
    if (schema == null) throw new IOException("rpl_sql: " + table + " has no schema in its Delta log");
    return new DeltaSnapshot(table, newest, schema, files);
  }

  private static boolean isComplete(List<Path> parts) {
    String name = parts.get(0).getName();
    // single-file: 00..v.checkpoint.parquet; multi-part: 00..v.checkpoint.0000000001.0000000003.parquet
    String[] bits = name.split("\\.");
    if (bits.length == 5) {
      try {
        return parts.size() == Integer.parseInt(bits[3]);
      } catch (NumberFormatException e) {
        return false;
      }
    }
    return bits.length == 3 && parts.size() == 1;
  }

  private static Path absolute(Path table, String raw) {
    try {
      Path p = new Path(new URI(raw));
      return p.isAbsolute() ? p : new Path(table, p);
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException("rpl_sql: a Delta add path that is not a URI: " + raw, e);
    }
  }

  private static void readCommit(FileSystem fs, Path commit, Path table, Map<String, AddFile> files,
                                 String[] schema) throws IOException {
    try (FSDataInputStream in = fs.open(commit);
         BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
      String line;
      while ((line = r.readLine()) != null) {
        if (line.isBlank()) continue;
        JsonNode a = JSON.readTree(line);
        if (a.has("add")) {
          JsonNode add = a.get("add");
          String raw = add.get("path").asText();
          JsonNode stats = add.get("stats");
          DeletionVector dv = DeletionVector.fromJson(add.get("deletionVector"));
          files.put(key(raw, dv), new AddFile(absolute(table, raw), add.path("size").asLong(),
              add.path("modificationTime").asLong(), stats == null || stats.isNull() ? null : stats.asText(), dv));
        } else if (a.has("remove")) {
          JsonNode rm = a.get("remove");
          files.remove(key(rm.get("path").asText(), DeletionVector.fromJson(rm.get("deletionVector"))));
        } else if (a.has("metaData")) {
          JsonNode md = a.get("metaData");
          checkConfiguration(md.get("configuration"), table);
          schema[0] = md.get("schemaString").asText();
        } else if (a.has("protocol")) {
          checkProtocol(a.get("protocol").get("readerFeatures"), table);
        }
      }
    }
  }

  private static void checkConfiguration(JsonNode conf, Path table) throws IOException {
    if (conf == null) return;
    JsonNode mode = conf.get("delta.columnMapping.mode");
    if (mode != null && !"none".equals(mode.asText()))
      throw new IOException("rpl_sql: " + table + " uses column mapping: read it with Delta Lake");
  }

  private static void checkProtocol(JsonNode features, Path table) throws IOException {
    if (features == null || !features.isArray()) return;
    for (JsonNode f : features) {
      if (!READABLE_FEATURES.contains(f.asText()))
        throw new IOException("rpl_sql: " + table + " needs the Delta reader feature " + f.asText()
            + ": read it with Delta Lake");
    }
  }

  private static void readCheckpoint(Path part, Configuration conf, Path table, Map<String, AddFile> files,
                                     String[] schema) throws IOException {
    try (ParquetReader<Group> r = ParquetReader.builder(new GroupReadSupport(), part).withConf(conf).build()) {
      Group g;
      while ((g = r.read()) != null) {
        if (present(g, "add")) {
          Group add = g.getGroup("add", 0);
          DeletionVector dv = null;
          if (present(add, "deletionVector")) {
            Group d = add.getGroup("deletionVector", 0);
            dv = new DeletionVector(d.getString("storageType", 0), d.getString("pathOrInlineDv", 0),
                present(d, "offset") ? d.getInteger("offset", 0) : -1, d.getInteger("sizeInBytes", 0),
                d.getLong("cardinality", 0));
          }
          String raw = add.getString("path", 0);
          files.put(key(raw, dv), new AddFile(absolute(table, raw), add.getLong("size", 0),
              add.getLong("modificationTime", 0), present(add, "stats") ? add.getString("stats", 0) : null, dv));
        } else if (present(g, "metaData")) {
          Group md = g.getGroup("metaData", 0);
          schema[0] = md.getString("schemaString", 0);
          if (present(md, "configuration")) {
            Group kv = md.getGroup("configuration", 0);
            int n = kv.getFieldRepetitionCount(0);
            for (int i = 0; i < n; i++) {
              Group e = kv.getGroup(0, i);
              if ("delta.columnMapping.mode".equals(e.getString("key", 0))
                  && present(e, "value") && !"none".equals(e.getString("value", 0)))
                throw new IOException("rpl_sql: " + table + " uses column mapping: read it with Delta Lake");
            }
          }
        } else if (present(g, "protocol")) {
          Group p = g.getGroup("protocol", 0);
          if (present(p, "readerFeatures")) {
            Group list = p.getGroup("readerFeatures", 0);
            int n = list.getFieldRepetitionCount(0);
            for (int i = 0; i < n; i++) {
              Group el = list.getGroup(0, i);
              String f = el.getString(0, 0);
              if (!READABLE_FEATURES.contains(f))
                throw new IOException("rpl_sql: " + table + " needs the Delta reader feature " + f
                    + ": read it with Delta Lake");
            }
          }
        }
      }
    }
  }

  private static boolean present(Group g, String field) {
    return g.getType().containsField(field) && g.getFieldRepetitionCount(field) > 0;
  }
}
