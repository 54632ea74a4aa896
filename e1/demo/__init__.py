"""`e1 demo`: the paper in miniature, offline on a laptop CPU (see :mod:`e1.data.digits_task`)."""
