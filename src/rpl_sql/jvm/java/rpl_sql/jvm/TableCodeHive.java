package rpl_sql.jvm;

import org.apache.hadoop.hive.ql.exec.UDFArgumentException;
import org.apache.hadoop.hive.ql.metadata.HiveException;
import org.apache.hadoop.hive.ql.udf.generic.GenericUDF;
import org.apache.hadoop.hive.serde2.objectinspector.ConstantObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.ObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.PrimitiveObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.primitive.PrimitiveObjectInspectorFactory;
import org.apache.hadoop.hive.serde2.objectinspector.primitive.StringObjectInspector;

/**
 * The table code for the spark-sql shell (CREATE FUNCTION ... USING JAR needs a Hive function there):
 * rpl_sql__jtc('spec', channel, db, table), the spec a constant read once in initialize.
 */
public final class TableCodeHive extends GenericUDF {
  private transient TableRules rules;
  private transient PrimitiveObjectInspector channel;
  private transient StringObjectInspector[] names;

  @Override
  public ObjectInspector initialize(ObjectInspector[] in) throws UDFArgumentException {
    if (in.length != 4 || !(in[0] instanceof ConstantObjectInspector)) {
      throw new UDFArgumentException("rpl_sql table code: (constant spec, channel, db, table)");
    }
    rules = TableRules.of(((ConstantObjectInspector) in[0]).getWritableConstantValue().toString());
    if (!(in[1] instanceof PrimitiveObjectInspector) || !(in[2] instanceof StringObjectInspector)
        || !(in[3] instanceof StringObjectInspector)) {
      throw new UDFArgumentException("rpl_sql table code: the channel's index or name, db and table strings");
    }
    channel = (PrimitiveObjectInspector) in[1];
    names = new StringObjectInspector[] {(StringObjectInspector) in[2], (StringObjectInspector) in[3]};
    return PrimitiveObjectInspectorFactory.javaIntObjectInspector;
  }

  @Override
  public Object evaluate(DeferredObject[] a) throws HiveException {
    return rules.code(channel.getPrimitiveJavaObject(a[1].get()), names[0].getPrimitiveJavaObject(a[2].get()),
        names[1].getPrimitiveJavaObject(a[3].get()));
  }

  @Override
  public String getDisplayString(String[] children) {
    return "rpl_sql__jtc(<spec>, " + children[1] + ", " + children[2] + ", " + children[3] + ")";
  }
}
