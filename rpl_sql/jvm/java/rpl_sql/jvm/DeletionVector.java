package rpl_sql.jvm;

import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.CRC32;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.roaringbitmap.RoaringBitmap;

/**
 * A data file's Delta deletion vector: its descriptor as the log states it, and the deleted row indexes it stores
 * (the protocol's RoaringBitmapArray: 32-bit Roaring bitmaps by the indexes' high words, read with the
 * RoaringBitmap library Spark ships). rpl_sql's merges write them; this reads any Delta writer's.
 */
public final class DeletionVector implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final int MAGIC = 1681511377;
  private static final String Z85 =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  private static final Map<String, Rows> LOADED = new ConcurrentHashMap<>();

  final String storageType, pathOrInlineDv;
  final int offset;  // -1: none (inline)
  final int sizeInBytes;
  final long cardinality;

  DeletionVector(String storageType, String pathOrInlineDv, int offset, int sizeInBytes, long cardinality) {
    this.storageType = storageType;
    this.pathOrInlineDv = pathOrInlineDv;
    this.offset = offset;
    this.sizeInBytes = sizeInBytes;
    this.cardinality = cardinality;
  }

  /** The protocol's identity of the vector: a live file is the pair (path, this id). */
  String uniqueId() {
    return storageType + pathOrInlineDv + (offset >= 0 ? "@" + offset : "");
  }

  /** The vector as one string that names its file absolutely (a scan's per-file metadata). */
  String locate(Path table) {
    String where;
    switch (storageType) {
      case "u": {
        String prefix = pathOrInlineDv.substring(0, pathOrInlineDv.length() - 20);
        ByteBuffer id = ByteBuffer.wrap(z85(pathOrInlineDv.substring(pathOrInlineDv.length() - 20)));
        java.util.UUID uuid = new java.util.UUID(id.getLong(), id.getLong());
        Path dir = prefix.isEmpty() ? table : new Path(table, prefix);
        where = new Path(dir, "deletion_vector_" + uuid + ".bin").toString();
        break;
      }
      case "p":
        where = pathOrInlineDv;
        break;
      case "i":
        where = "";
        break;
      default:
        throw new IllegalArgumentException("rpl_sql: unknown deletion vector storage type " + storageType);
    }
    return storageType + "\n" + where + "\n" + (storageType.equals("i") ? pathOrInlineDv : "") + "\n" + offset
        + "\n" + sizeInBytes + "\n" + cardinality;
  }

  /** The deleted rows of a vector given by {@link #locate}, read once per JVM while it is in use. */
  static Rows rows(String located, Configuration conf) throws IOException {
    Rows r = LOADED.get(located);
    if (r != null) return r;
    if (LOADED.size() > 256) LOADED.clear();
    String[] f = located.split("\n", -1);
    int offset = Integer.parseInt(f[3]);
    int size = Integer.parseInt(f[4]);
    long cardinality = Long.parseLong(f[5]);
    byte[] data;
    if (f[0].equals("i")) {
      data = java.util.Arrays.copyOf(z85(f[2]), size);
    } else {
      Path p = new Path(f[1]);
      FileSystem fs = p.getFileSystem(conf);
      data = new byte[size];
      try (FSDataInputStream in = fs.open(p)) {
        in.seek(offset < 0 ? 1 : offset);
        int stated = in.readInt();
        in.readFully(data);
        int sum = in.readInt();
        CRC32 crc = new CRC32();
        crc.update(data);
        if (stated != size || sum != (int) crc.getValue())
          throw new IOException("rpl_sql: the deletion vector at " + offset + " of " + p + " is damaged");
      }
    }
    r = decode(data);
    if (r.cardinality() != cardinality)
      throw new IOException("rpl_sql: a deletion vector holds " + r.cardinality() + " rows, its descriptor says "
          + cardinality);
    LOADED.put(located, r);
    return r;
  }

  static Rows decode(byte[] data) throws IOException {
    ByteBuffer b = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN);
    if (b.getInt() != MAGIC) throw new IOException("rpl_sql: not a Delta deletion vector (bad magic number)");
    long n = b.getLong();
    long[] highs = new long[(int) n];
    RoaringBitmap[] maps = new RoaringBitmap[(int) n];
    for (int i = 0; i < n; i++) {
      highs[i] = b.getInt() & 0xFFFFFFFFL;
      RoaringBitmap m = new RoaringBitmap();
      ByteBuffer slice = b.slice().order(ByteOrder.LITTLE_ENDIAN);
      m.deserialize(slice);
      b.position(b.position() + m.serializedSizeInBytes());
      maps[i] = m;
    }
    return new Rows(highs, maps);
  }

  static byte[] z85(String s) {
    byte[] out = new byte[s.length() / 5 * 4];
    for (int i = 0, o = 0; i + 5 <= s.length(); i += 5, o += 4) {
      long v = 0;
      for (int j = 0; j < 5; j++) v = v * 85 + Z85.indexOf(s.charAt(i + j));
      out[o] = (byte) (v >>> 24);
      out[o + 1] = (byte) (v >>> 16);
      out[o + 2] = (byte) (v >>> 8);
      out[o + 3] = (byte) v;
    }
    return out;
  }

  static DeletionVector fromJson(com.fasterxml.jackson.databind.JsonNode d) {
    if (d == null || d.isNull()) return null;
    return new DeletionVector(d.get("storageType").asText(), d.get("pathOrInlineDv").asText(),
        d.hasNonNull("offset") ? d.get("offset").asInt() : -1, d.get("sizeInBytes").asInt(),
        d.get("cardinality").asLong());
  }

  /** Deleted row indexes: one 32-bit bitmap per high word. */
  static final class Rows {
    private final long[] highs;
    private final RoaringBitmap[] maps;

    Rows(long[] highs, RoaringBitmap[] maps) {
      this.highs = highs;
      this.maps = maps;
    }

    boolean contains(long row) {
      long high = row >>> 32;
      for (int i = 0; i < highs.length; i++) {
        if (highs[i] == high) return maps[i].contains((int) row);
      }
      return false;
    }

    long cardinality() {
      long n = 0;
      for (RoaringBitmap m : maps) n += m.getLongCardinality();
      return n;
    }
  }

  @Override
  public String toString() {
    return uniqueId();
  }
}
