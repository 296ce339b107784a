import sys

from rpl_sql.cli.shell import main

if __name__ == "__main__":
    sys.exit(main())
