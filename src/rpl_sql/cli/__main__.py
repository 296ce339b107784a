import sys

from rpl_sql.cli.shell import main

sys.exit(main())
