package rpl_sql.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.execution.datasources.FileIndex;
import org.apache.spark.sql.execution.datasources.PartitionDirectory;
import org.apache.spark.sql.execution.datasources.FileStatusWithMetadata;
import org.apache.spark.sql.types.StructType;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A replica table's files for Spark's own Parquet scan: at every listing (once per query plan) the table is looked
 * up in its channel's catalog and its latest committed Delta version read, so a query sees the last committed
 * batch and never an uncommitted or torn one; files whose statistics rule the query's filters out are skipped. A
 * file's deletion vector goes with it to the scan ({@link ReplicaParquetFormat} leaves its deleted rows out).
 */
public final class ReplicaFileIndex implements FileIndex {
  private final String warehouse, channel, db, name;
  private final Configuration conf;
  private volatile DeltaSnapshot last;

  ReplicaFileIndex(String warehouse, String channel, String db, String name, Configuration conf) {
    this.warehouse = warehouse;
    this.channel = channel;
    this.db = db;
    this.name = name;
    this.conf = conf;
  }

  /** The table's snapshot now (its data folder as the catalog says, at its newest version). */
  DeltaSnapshot snapshot() {
    try {
      ReplicaCatalog.Entry e = ReplicaCatalog.find(warehouse, channel, db, name, conf);
      if (e == null)
        throw new IllegalStateException("rpl_sql: the replica of channel '" + channel + "' has no table " + db + "."
            + name + " now (dropped or renamed?); SELECT * FROM rpl_sql_replica_tables lists them");
      if ("copying".equals(e.state) || "backfilling".equals(e.state))
        throw new IllegalStateException("rpl_sql: " + db + "." + name + " is " + e.state
            + " (SHOW REPLICA TABLES): it is readable once whole");
      last = DeltaSnapshot.latest(e.data, conf);
      return last;
    } catch (IOException ex) {
      throw new UncheckedIOException(ex);
    }
  }

  @Override
  public Seq<PartitionDirectory> listFiles(Seq<Expression> partitionFilters, Seq<Expression> dataFilters) {
    List<Expression> filters = CollectionConverters.asJava(dataFilters);
    List<FileStatusWithMetadata> kept = new ArrayList<>();
    DeltaSnapshot snap = snapshot();
    for (DeltaSnapshot.AddFile f : snap.files()) {
      boolean may = true;
      for (Expression e : filters) {
        if (!FileStats.mayMatch(f.stats, e)) {
          may = false;
          break;
        }
      }
      if (!may) continue;
      FileStatus st = new FileStatus(f.size, false, 1, 128L << 20, f.modificationTime, f.path);
      scala.collection.immutable.Map<String, Object> meta = f.deletionVector == null
          ? scala.collection.immutable.Map$.MODULE$.<String, Object>empty()
          : new scala.collection.immutable.Map.Map1<>(ReplicaParquetFormat.VECTOR, f.deletionVector.locate(snap.table));
      kept.add(new FileStatusWithMetadata(st, meta));
    }
    PartitionDirectory dir = new PartitionDirectory(InternalRow.empty(), CollectionConverters.asScala(kept).toList());
    return CollectionConverters.asScala(List.of(dir)).toList();
  }

  @Override
  public Seq<Path> rootPaths() {
    DeltaSnapshot s = last != null ? last : snapshot();
    return CollectionConverters.asScala(List.of(s.table)).toList();
  }

  @Override
  public String[] inputFiles() {
    List<String> out = new ArrayList<>();
    for (DeltaSnapshot.AddFile f : snapshot().files()) out.add(f.path.toString());
    return out.toArray(new String[0]);
  }

  @Override
  public void refresh() {}

  @Override
  public long sizeInBytes() {
    DeltaSnapshot s = last != null ? last : snapshot();
    return s.sizeInBytes();
  }

  @Override
  public StructType partitionSchema() {
    return new StructType();
  }

  @Override
  public String toString() {
    return "rpl_sql replica table " + db + "." + name + " (channel '" + channel + "')";
  }
}
