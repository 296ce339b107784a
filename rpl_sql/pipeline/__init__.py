"""Source binlog -> events -> decisions -> applied output: ingest, classify, source filtering, the applier."""
