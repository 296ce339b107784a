package rpl_sql.jvm;

import org.apache.spark.sql.api.java.UDF3;

/**
 * The table code as a Java UDF for Python sessions: the instance carries its spec to every executor. The
 * channel is an Object: Spark hands it over as the SQL gives it, an Integer index or a String name.
 */
public final class TableCode implements UDF3<Object, String, String, Integer> {
  private static final long serialVersionUID = 1L;
  private final String spec;
  private transient TableRules rules;

  public TableCode(String spec) {
    this.spec = spec;
    TableRules.of(spec);  // a bad spec fails at registration, not in a task
  }

  @Override
  public Integer call(Object channel, String db, String table) {
    if (rules == null) {
      rules = TableRules.of(spec);
    }
    return rules.code(channel, db, table);
  }
}
