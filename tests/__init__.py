"""rpl_sql's tests: folders mirror rpl_sql's; shared helpers live in support/."""
