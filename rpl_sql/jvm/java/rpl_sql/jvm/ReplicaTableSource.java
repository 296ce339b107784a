package rpl_sql.jvm;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.RelationProvider;
import org.apache.spark.sql.sources.SchemaRelationProvider;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.collection.immutable.Map;

/**
 * Replica tables by name at the speed of Spark's own Parquet scan:
 * {@code CREATE TABLE crm.orders (...) USING rpl_sql.jvm.ReplicaTableSource OPTIONS (warehouse '...', channel 'a',
 * db 'crm', name 'orders')}. The relation is Spark's HadoopFsRelation over Parquet (column pruning, filter pushdown,
 * row-group skipping, codegen) with a {@link ReplicaFileIndex} that reads the table's latest Delta version at every
 * query and skips files by their statistics.
 */
public final class ReplicaTableSource implements RelationProvider, SchemaRelationProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "rpl_sql_replica";
  }

  @Override
  public BaseRelation createRelation(SQLContext ctx, Map<String, String> options) {
    return createRelation(ctx, options, null);
  }

  @Override
  public BaseRelation createRelation(SQLContext ctx, Map<String, String> options, StructType schema) {
    Configuration conf = ctx.sparkContext().hadoopConfiguration();
    ReplicaFileIndex index = new ReplicaFileIndex(option(options, "warehouse"), option(options, "channel"),
        option(options, "db"), option(options, "name"), conf);
    StructType data = schema != null ? schema : (StructType) DataType.fromJson(index.snapshot().schemaString);
    return new HadoopFsRelation(index, new StructType(), data, Option.empty(), new ReplicaParquetFormat(),
        scala.collection.immutable.Map$.MODULE$.<String, String>empty(), ctx.sparkSession());
  }

  private static String option(Map<String, String> options, String key) {
    Option<String> v = options.get(key);
    if (v.isEmpty()) throw new IllegalArgumentException("rpl_sql.jvm.ReplicaTableSource needs the option " + key);
    return v.get();
  }
}
