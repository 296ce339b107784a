"""What setup.cfg cannot say: the grammar, kept in grammar/ at the repository's top, goes into the wheel as
rpl_sql/grammar/ (rpl_sql.language.parser reads it there, or from the checkout)."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib, "rpl_sql", "grammar")
        self.mkpath(str(target))
        for grammar in sorted(Path(__file__).resolve().parent.joinpath("grammar").glob("*.lark")):
            self.copy_file(str(grammar), str(target / grammar.name))


setup(cmdclass={"build_py": BuildPy})
