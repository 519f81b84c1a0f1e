"""Math tasks: a tool agent (Python) and a reasoner (\\boxed{}) solve one problem."""
