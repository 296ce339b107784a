"""`rpl-sql relay`: beside the source, it reads the source's binlog once and serves replicas over the MySQL
replication protocol (WL#2387's filtering at the source, done next to it)."""
