"""Filter configurations in and out: MySQL option files, MariaDB options and statements, AWS DMS table
mappings, Debezium include/exclude lists.

Every reader returns a `FilterConfig` and every writer takes one (or a `ServerState`), so a format is one
module with a `read_*` and/or a `write_*`; nothing here touches a file, Spark or Delta. A writer raises
`NotExpressibleError` (a MySQLError) naming the rule when the target cannot state the rule set exactly.
"""
from rpl_sql.configs.model import FilterConfig, NotExpressibleError, from_state

__all__ = ["FilterConfig", "NotExpressibleError", "from_state"]
