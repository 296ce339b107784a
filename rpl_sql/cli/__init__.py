"""Front ends: the `rpl-sql` shell and its subcommands, and the notebook magic."""
from rpl_sql.cli.shell import main

__all__ = ["main"]
