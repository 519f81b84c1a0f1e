"""Writing tasks: two agents write complementary texts (TLDR, arXiv)."""
