package rpl_sql.jvm;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.PartitionedFile;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat$;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DayTimeIntervalType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.types.YearMonthIntervalType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;
import scala.Function1;
import scala.Option;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.collection.immutable.Map;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;

/**
 * Spark's own Parquet reader, leaving out the rows a file's Delta deletion vector deletes. {@link ReplicaFileIndex}
 * puts a file's vector in its listing's metadata ({@link #VECTOR}); such a file is read with Parquet's row index
 * beside the asked columns, and each batch's kept rows are moved down in its own vectors (values, or dictionary ids,
 * and the offsets of strings; no string bytes are copied), so the batch keeps the vector classes Spark's generated
 * code expects. A schema with nested columns (which replica tables never have) gets views instead
 * ({@link SelectedVector}), and promises no vector classes. Files without a vector take the plain reader.
 */
public final class ReplicaParquetFormat extends ParquetFileFormat {
  static final String VECTOR = "rpl_sql_deletion_vector";

  @Override
  public Option<Seq<String>> vectorTypes(StructType required, StructType partition, SQLConf conf) {
    return flat(required) ? super.vectorTypes(required, partition, conf) : Option.empty();
  }

  /** Whether every column is of a type whose vectors {@link Kept} can compact in place. */
  static boolean flat(StructType schema) {
    for (StructField f : schema.fields()) {
      DataType t = f.dataType();
      if (t instanceof StructType || t instanceof ArrayType || t instanceof MapType) return false;
    }
    return true;
  }

  @Override
  public Function1<PartitionedFile, Iterator<InternalRow>> buildReaderWithPartitionValues(
      SparkSession session, StructType data, StructType partition, StructType required, Seq<Filter> filters,
      Map<String, String> options, Configuration conf) {
    Function1<PartitionedFile, Iterator<InternalRow>> plain =
        super.buildReaderWithPartitionValues(session, data, partition, required, filters, options, conf);
    StructType indexed = required.add(ParquetFileFormat$.MODULE$.ROW_INDEX_TEMPORARY_COLUMN_NAME(),
        DataTypes.LongType, true);
    Function1<PartitionedFile, Iterator<InternalRow>> withIndex =
        super.buildReaderWithPartitionValues(session, data, partition, indexed, filters, options, conf);
    return new Reader(plain, withIndex, required.length(), partition.length(), flat(required),
        new SerializableConfiguration(conf));
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof ReplicaParquetFormat;
  }

  @Override
  public int hashCode() {
    return ReplicaParquetFormat.class.hashCode();
  }

  @Override
  public String toString() {
    return "Parquet with Delta deletion vectors (rpl_sql)";
  }

  private static final class Reader extends AbstractFunction1<PartitionedFile, Iterator<InternalRow>>
      implements Serializable {
    private static final long serialVersionUID = 1L;
    private final Function1<PartitionedFile, Iterator<InternalRow>> plain, withIndex;
    private final int width, partitionWidth;
    private final boolean inPlace;
    private final SerializableConfiguration conf;

    Reader(Function1<PartitionedFile, Iterator<InternalRow>> plain,
           Function1<PartitionedFile, Iterator<InternalRow>> withIndex, int width, int partitionWidth,
           boolean inPlace, SerializableConfiguration conf) {
      this.plain = plain;
      this.withIndex = withIndex;
      this.width = width;
      this.partitionWidth = partitionWidth;
      this.inPlace = inPlace;
      this.conf = conf;
    }

    @Override
    @SuppressWarnings({"rawtypes", "unchecked"})
    public Iterator<InternalRow> apply(PartitionedFile file) {
      Option<Object> vector = file.otherConstantMetadataColumnValues().get(VECTOR);
      if (vector.isEmpty()) return plain.apply(file);
      DeletionVector.Rows deleted;
      try {
        deleted = DeletionVector.rows((String) vector.get(), conf.value());
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      return (Iterator) new Kept(withIndex.apply(file), deleted, width, partitionWidth, inPlace);  // batches as rows
    }
  }

  /** The rows of a file's reader that its vector keeps: batches as views, rows skipped. */
  @SuppressWarnings("rawtypes")
  private static final class Kept extends AbstractIterator<Object> {
    private final Iterator in;
    private final DeletionVector.Rows deleted;
    private final int width, partitionWidth;
    private final boolean inPlace;
    private Object next;

    Kept(Iterator in, DeletionVector.Rows deleted, int width, int partitionWidth, boolean inPlace) {
      this.in = in;
      this.deleted = deleted;
      this.width = width;
      this.partitionWidth = partitionWidth;
      this.inPlace = inPlace;
    }

    @Override
    public boolean hasNext() {
      while (next == null && in.hasNext()) {
        Object o = in.next();
        if (o instanceof ColumnarBatch) {
          next = keep((ColumnarBatch) o);
        } else {
          InternalRow r = (InternalRow) o;
          if (!deleted.contains(r.getLong(width))) next = r;
        }
      }
      return next != null;
    }

    @Override
    public Object next() {
      if (!hasNext()) throw new java.util.NoSuchElementException();
      Object o = next;
      next = null;
      return o;
    }

    /** The batch's asked columns (row index after them, then any partition columns) over its kept rows. */
    private Object keep(ColumnarBatch b) {
      int rows = b.numRows();
      ColumnVector index = b.column(width);
      int[] kept = new int[rows];
      int n = 0;
      for (int i = 0; i < rows; i++) {
        if (!deleted.contains(index.getLong(i))) kept[n++] = i;
      }
      ColumnVector[] out = new ColumnVector[width + partitionWidth];
      for (int c = 0; c < out.length; c++) {
        ColumnVector v = b.column(c < width ? c : c + 1);
        if (n == rows || c >= width) {
          out[c] = v;  // partition values are constant
        } else if (inPlace && v instanceof WritableColumnVector) {
          compact((WritableColumnVector) v, kept, n);
          out[c] = v;
        } else {
          out[c] = new SelectedVector(v, kept, n);
        }
      }
      return new ColumnarBatch(out, n);
    }
  }

  /**
   * Rows kept[0..n) of `v` moved to 0..n (kept is ascending, so each move reads a row not yet written): the
   * reader fills these vectors afresh for its next batch.
   */
  public static void compact(WritableColumnVector v, int[] kept, int n) {
    boolean nulls = v.hasNull();
    for (int j = 0; j < n; j++) {
      int s = kept[j];
      if (nulls) {
        if (v.isNullAt(s)) {
          v.putNull(j);
          continue;
        }
        v.putNotNull(j);
      }
      if (s == j) continue;
      if (v.hasDictionary()) {
        WritableColumnVector ids = v.getDictionaryIds();
        ids.putInt(j, ids.getInt(s));
        continue;
      }
      DataType t = v.dataType();
      if (t instanceof BooleanType) v.putBoolean(j, v.getBoolean(s));
      else if (t instanceof ByteType) v.putByte(j, v.getByte(s));
      else if (t instanceof ShortType) v.putShort(j, v.getShort(s));
      else if (t instanceof IntegerType || t instanceof DateType || t instanceof YearMonthIntervalType)
        v.putInt(j, v.getInt(s));
      else if (t instanceof LongType || t instanceof TimestampType || t instanceof TimestampNTZType
          || t instanceof DayTimeIntervalType) v.putLong(j, v.getLong(s));
      else if (t instanceof FloatType) v.putFloat(j, v.getFloat(s));
      else if (t instanceof DoubleType) v.putDouble(j, v.getDouble(s));
      else if (t instanceof DecimalType && ((DecimalType) t).precision() <= Decimal.MAX_INT_DIGITS())
        v.putInt(j, v.getInt(s));
      else if (t instanceof DecimalType && ((DecimalType) t).precision() <= Decimal.MAX_LONG_DIGITS())
        v.putLong(j, v.getLong(s));
      else if (t instanceof StringType || t instanceof BinaryType || t instanceof DecimalType)
        v.putArray(j, v.getArrayOffset(s), v.getArrayLength(s));
      else throw new UnsupportedOperationException("rpl_sql: deletion vectors over a column of type " + t);
    }
  }
}
