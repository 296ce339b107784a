-- rpl_sql demo: three source channels, MySQL 8 replication filters, and a sample multi-channel
-- events table filtered in plain Spark SQL.      Run:  rpl-sql --warehouse demo_wh -f sql/demo.sql

-- Start from a clean replica (the demo can be run again and again).
STOP REPLICA;
RESET REPLICA ALL;

-- One channel per source, as in MySQL multi-source replication.
CHANGE REPLICATION SOURCE TO SOURCE_HOST='orders-db.internal', SOURCE_PORT=3306, SOURCE_USER='repl' FOR CHANNEL 'orders';
CHANGE REPLICATION SOURCE TO SOURCE_HOST='crm-db.internal', SOURCE_PORT=3306, SOURCE_USER='repl' FOR CHANNEL 'crm';
CHANGE REPLICATION SOURCE TO SOURCE_HOST='legacy-db.internal', SOURCE_PORT=3307, SOURCE_USER='repl' FOR CHANNEL 'legacy';

-- Global filters: written into every configured channel (and copied into channels configured later).
CHANGE REPLICATION FILTER REPLICATE_IGNORE_DB = (mysql, sys),
                          REPLICATE_WILD_IGNORE_TABLE = ('%.tmp\_%');

-- Per-channel filters replace the global value of the same type only.
CHANGE REPLICATION FILTER REPLICATE_DO_DB = (shop, `shop,eu`) FOR CHANNEL 'orders';
CHANGE REPLICATION FILTER REPLICATE_DO_TABLE = (crm.customers, crm.contacts),
                          REPLICATE_WILD_DO_TABLE = ('crm.deal%') FOR CHANNEL 'crm';
CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = ((legacy_app, app)),
                          REPLICATE_IGNORE_TABLE = (app.audit_log) FOR CHANNEL 'legacy';
START REPLICA;

-- What performance_schema would show.
SELECT * FROM replication_applier_global_filters;
SELECT CHANNEL_NAME, FILTER_NAME, FILTER_RULE, CONFIGURED_BY, COUNTER FROM replication_applier_filters;
SHOW REPLICA STATUS FOR CHANNEL 'legacy'\G

-- A sample of landed change events from the three sources (row events and statement events).
CREATE OR REPLACE TEMPORARY VIEW sample_events AS SELECT * FROM VALUES
  (1, 'orders', 'row',       NULL,           NULL,         'shop',       'orders'),
  (2, 'orders', 'row',       NULL,           NULL,         'shop,eu',    'orders'),
  (3, 'orders', 'row',       NULL,           NULL,         'analytics',  'clicks'),
  (4, 'orders', 'row',       NULL,           NULL,         'shop',       'tmp_import'),
  (5, 'orders', 'statement', 'UPDATE',       'analytics',  'shop',       'orders'),
  (6, 'crm',    'row',       NULL,           NULL,         'crm',        'customers'),
  (7, 'crm',    'row',       NULL,           NULL,         'crm',        'deals_2024'),
  (8, 'crm',    'row',       NULL,           NULL,         'crm',        'notes'),
  (9, 'crm',    'statement', 'BEGIN',        'crm',        NULL,         NULL),
  (10, 'legacy', 'row',      NULL,           NULL,         'legacy_app', 'users'),
  (11, 'legacy', 'row',      NULL,           NULL,         'legacy_app', 'audit_log'),
  (12, 'legacy', 'statement', 'CREATE_TABLE', 'legacy_app', NULL,        'sessions'),
  (13, 'legacy', 'row',      NULL,           NULL,         'mysql',      'user'),
  (14, 'billing', 'row',     NULL,           NULL,         'shop',       'orders')
  AS t(id, channel, kind, command, default_db, db_name, table_name);

-- Decide every event as each channel's MySQL 8 replica would; no Python runs per row.
-- (The statement events' table is unqualified when db_name is NULL, so it resolves to the default db.)
SELECT id, channel, kind, coalesce(command, '') AS command, coalesce(db_name, default_db) AS db, table_name,
       CASE kind WHEN 'row' THEN should_apply(channel, db_name, table_name)
            ELSE should_apply_statement(channel, command, default_db,
                   CASE WHEN table_name IS NULL THEN array()
                        ELSE array(named_struct('db', db_name, 'name', table_name, 'updating', true)) END)
       END AS applied,
       CASE kind WHEN 'row' THEN filter_decided_by(channel, db_name, table_name)
            ELSE filter_decided_by_statement(channel, command, default_db,
                   CASE WHEN table_name IS NULL THEN array()
                        ELSE array(named_struct('db', db_name, 'name', table_name, 'updating', true)) END)
       END AS decided_by,
       rewrite_db(channel, coalesce(db_name, default_db)) AS applied_to_db
FROM sample_events ORDER BY id;

-- The same decision as a filter over the events: what a replica would apply, per channel.
SELECT channel, count(*) AS events, count_if(should_apply(channel, db_name, table_name)) AS applied
FROM sample_events WHERE kind = 'row' GROUP BY channel ORDER BY channel;
