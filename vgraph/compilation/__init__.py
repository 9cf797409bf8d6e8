"""Piecewise compilation: a torch.compile backend that splits the model at the attention op.

split.py (FX graph -> pieces), backend.py (the torch.compile backend), piece.py (a captured piece
at run time), cache.py (compiled artifacts on disk), piecewise.py (compile_piecewise, called by
the model runner). Whether piecewise compilation is available is the config's call
(CompilationConfig.piecewise_available).
"""
