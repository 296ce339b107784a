"""What the tests share: MariaDB servers, a standalone Spark cluster, the spark-sql shell's JVM, the spec's
scenarios and landed events."""
