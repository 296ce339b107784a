"""The MySQL/MariaDB source as a client sees it: how to connect to a channel's source, and its table list."""
