package rpl_sql.jvm;

import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/** The rows `selected` of a column vector, in order, without copying them: a batch with its deleted rows left out. */
final class SelectedVector extends ColumnVector {
  private final ColumnVector in;
  private final int[] selected;
  private final int count;
  private ColumnVector[] children;

  SelectedVector(ColumnVector in, int[] selected, int count) {
    super(in.dataType());
    this.in = in;
    this.selected = selected;
    this.count = count;
  }

  @Override
  public void close() {}  // the batch's own vectors are closed by their reader

  @Override
  public boolean hasNull() {
    return in.hasNull();
  }

  @Override
  public int numNulls() {
    if (!in.hasNull()) return 0;
    int n = 0;
    for (int i = 0; i < count; i++) if (in.isNullAt(selected[i])) n++;
    return n;
  }

  @Override
  public boolean isNullAt(int i) {
    return in.isNullAt(selected[i]);
  }

  @Override
  public boolean getBoolean(int i) {
    return in.getBoolean(selected[i]);
  }

  @Override
  public byte getByte(int i) {
    return in.getByte(selected[i]);
  }

  @Override
  public short getShort(int i) {
    return in.getShort(selected[i]);
  }

  @Override
  public int getInt(int i) {
    return in.getInt(selected[i]);
  }

  @Override
  public long getLong(int i) {
    return in.getLong(selected[i]);
  }

  @Override
  public float getFloat(int i) {
    return in.getFloat(selected[i]);
  }

  @Override
  public double getDouble(int i) {
    return in.getDouble(selected[i]);
  }

  @Override
  public ColumnarArray getArray(int i) {
    return in.getArray(selected[i]);
  }

  @Override
  public ColumnarMap getMap(int i) {
    return in.getMap(selected[i]);
  }

  @Override
  public Decimal getDecimal(int i, int precision, int scale) {
    return in.getDecimal(selected[i], precision, scale);
  }

  @Override
  public UTF8String getUTF8String(int i) {
    return in.getUTF8String(selected[i]);
  }

  @Override
  public byte[] getBinary(int i) {
    return in.getBinary(selected[i]);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    if (children == null) children = new ColumnVector[Math.max(ordinal + 1, 4)];
    if (ordinal >= children.length) children = java.util.Arrays.copyOf(children, ordinal + 1);
    if (children[ordinal] == null) children[ordinal] = new SelectedVector(in.getChild(ordinal), selected, count);
    return children[ordinal];
  }
}
