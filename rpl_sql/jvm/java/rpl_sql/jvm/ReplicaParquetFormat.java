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
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
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
 * beside the asked columns, and each batch comes out as views of the rows that are left (no copy). Files without a
 * vector take the plain reader. The column vector classes are not promised (vectorTypes), as the views are not
 * Spark's own.
 */
public final class ReplicaParquetFormat extends ParquetFileFormat {
  static final String VECTOR = "rpl_sql_deletion_vector";

  @Override
  public Option<Seq<String>> vectorTypes(StructType required, StructType partition, SQLConf conf) {
    return Option.empty();
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
    return new Reader(plain, withIndex, required.length(), partition.length(), new SerializableConfiguration(conf));
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
    private final SerializableConfiguration conf;

    Reader(Function1<PartitionedFile, Iterator<InternalRow>> plain,
           Function1<PartitionedFile, Iterator<InternalRow>> withIndex, int width, int partitionWidth,
           SerializableConfiguration conf) {
      this.plain = plain;
      this.withIndex = withIndex;
      this.width = width;
      this.partitionWidth = partitionWidth;
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
      return (Iterator) new Kept(withIndex.apply(file), deleted, width, partitionWidth);  // batches pass as rows
    }
  }

  /** The rows of a file's reader that its vector keeps: batches as views, rows skipped. */
  @SuppressWarnings("rawtypes")
  private static final class Kept extends AbstractIterator<Object> {
    private final Iterator in;
    private final DeletionVector.Rows deleted;
    private final int width, partitionWidth;
    private Object next;

    Kept(Iterator in, DeletionVector.Rows deleted, int width, int partitionWidth) {
      this.in = in;
      this.deleted = deleted;
      this.width = width;
      this.partitionWidth = partitionWidth;
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
        out[c] = n == rows ? v : new SelectedVector(v, kept, n);
      }
      return new ColumnarBatch(out, n);
    }
  }
}
