"""`%load_ext rpl_sql.magic`, the name notebooks used before the magic moved to `rpl_sql.cli.magic`.

`%load_ext rpl_sql` is the documented form; this module keeps existing notebooks working.
"""
from rpl_sql.cli.magic import load_ipython_extension

__all__ = ["load_ipython_extension"]
