package rpl_sql.jvm;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.hadoop.ParquetReader;
import org.apache.parquet.hadoop.example.GroupReadSupport;

/**
 * Where a replica table's data lives now: a channel's replica catalog (storage/replica_catalog.py, a Delta table
 * of one row per table) read at its latest version. A table's folder changes when it is created again, copied
 * again or backfilled, so every query looks it up; the rows are kept per catalog version.
 */
final class ReplicaCatalog {
  /** A table's entry: its data folder and what the replica is doing with it (null: replicated). */
  static final class Entry {
    final Path data;
    final String state;

    Entry(Path data, String state) {
      this.data = data;
      this.state = state;
    }
  }

  private static final Map<String, Object[]> READ = new ConcurrentHashMap<>(); // path -> {version, tables}

  private ReplicaCatalog() {}

  static Path root(String warehouse) {
    String w = warehouse.endsWith("/") ? warehouse.substring(0, warehouse.length() - 1) : warehouse;
    return new Path(w + "/replica");
  }

  static Path path(String warehouse, String channel) {
    try {
      byte[] h = MessageDigest.getInstance("SHA-1").digest(channel.getBytes(StandardCharsets.UTF_8));
      StringBuilder hex = new StringBuilder();
      for (byte b : h) hex.append(String.format("%02x", b));
      return new Path(root(warehouse), "_catalog/" + hex.substring(0, 16));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  /** The entry of `db`.`name` (as the catalog spells them) in the channel's replica now, or null. */
  @SuppressWarnings("unchecked")
  static Entry find(String warehouse, String channel, String db, String name, Configuration conf)
      throws IOException {
    Path cat = path(warehouse, channel);
    DeltaSnapshot snap = DeltaSnapshot.latest(cat, conf);
    Object[] known = READ.get(cat.toString());
    Map<String, Entry> tables;
    if (known != null && (Long) known[0] == snap.version) {
      tables = (Map<String, Entry>) known[1];
    } else {
      tables = new HashMap<>();
      Path root = root(warehouse);
      for (DeltaSnapshot.AddFile f : snap.files()) {
        try (ParquetReader<Group> r = ParquetReader.builder(new GroupReadSupport(), f.path).withConf(conf).build()) {
          Group g;
          while ((g = r.read()) != null) {
            if (!"table".equals(text(g, "kind"))) continue;
            tables.put(key(text(g, "db"), text(g, "name")), new Entry(new Path(root, text(g, "path")), text(g, "state")));
          }
        }
      }
      READ.put(cat.toString(), new Object[] {snap.version, tables});
    }
    return tables.get(key(db, name));
  }

  private static String key(String db, String name) {
    return db + "\u0000" + name;
  }

  private static String text(Group g, String field) {
    return g.getType().containsField(field) && g.getFieldRepetitionCount(field) > 0 ? g.getString(field, 0) : null;
  }
}
