package rpl_sql.jvm;

import org.apache.hadoop.hive.ql.exec.UDFArgumentException;
import org.apache.hadoop.hive.ql.udf.generic.GenericUDF;
import org.apache.hadoop.hive.serde2.objectinspector.ConstantObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.ObjectInspector;
import org.apache.hadoop.hive.serde2.objectinspector.primitive.PrimitiveObjectInspectorFactory;
import org.apache.hadoop.hive.serde2.typeinfo.TypeInfoFactory;
import org.apache.hadoop.io.BooleanWritable;
import org.apache.spark.sql.SparkSession;
import scala.Option;

/**
 * The spark-sql shell's way to the row code (RowCode): CREATE FUNCTION ... USING JAR knows only Hive
 * functions there, so this one, rpl_sql__jinstall('row rewrite statement', 'spec'), puts the builders of
 * RowCode, RewriteDb and StatementCode (RowCodeFunction.KINDS) under those space-separated names into the analysing
 * session's function registry, as Python sessions do through py4j. It does so while Spark
 * analyses the call, on the driver; the call itself is the constant TRUE, folded there.
 */
public final class RowCodeHive extends GenericUDF {
  private static final BooleanWritable TRUE = new BooleanWritable(true);

  @Override
  public ObjectInspector initialize(ObjectInspector[] in) throws UDFArgumentException {
    if (in.length != 2 || !(in[0] instanceof ConstantObjectInspector) || !(in[1] instanceof ConstantObjectInspector)) {
      throw new UDFArgumentException("rpl_sql__jinstall: (constant function names, constant spec)");
    }
    String[] names = ((ConstantObjectInspector) in[0]).getWritableConstantValue().toString().split(" ");
    if (names.length != RowCodeFunction.KINDS.length) {
      throw new UDFArgumentException("rpl_sql__jinstall: the names of the row, rewrite and statement functions");
    }
    String spec = ((ConstantObjectInspector) in[1]).getWritableConstantValue().toString();
    Option<SparkSession> active = SparkSession.getActiveSession();
    if (active.isDefined()) {  // the driver; an executor only evaluates the folded constant
      for (int i = 0; i < names.length; i++) {
        ((org.apache.spark.sql.classic.SparkSession) active.get()).sessionState().functionRegistry()
            .createOrReplaceTempFunction(names[i], new RowCodeFunction(spec, RowCodeFunction.KINDS[i]), "java_udf");
      }
    }
    return PrimitiveObjectInspectorFactory.getPrimitiveWritableConstantObjectInspector(
        TypeInfoFactory.booleanTypeInfo, TRUE);
  }

  @Override
  public Object evaluate(DeferredObject[] a) {
    return TRUE;
  }

  @Override
  public String getDisplayString(String[] children) {
    return "rpl_sql__jinstall(" + children[0] + ", <spec>)";
  }
}
