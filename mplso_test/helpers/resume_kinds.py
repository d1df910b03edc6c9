"""The kinds of run that `workers/resume_worker` trains, and their lengths.

Shared by `resume_test` and the worker, which has one `run_KIND` function for
each kind.
"""

STEPS = 10  # Steps of every kind but `keras3_fit`, one checkpoint each.
EPOCHS = 6  # Epochs of `keras3_fit`, one checkpoint each.
KINDS = ("keras3", "tf1_function", "tf1_graph", "keras3_fit")
