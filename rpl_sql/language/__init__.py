"""Statement text to typed statements: the lexer, the parser of the Lark grammar (grammar/ at the repository's
top) and the statement classes."""
