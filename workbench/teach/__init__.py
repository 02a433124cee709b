"""Teaching aspects: the workbench asks which aspect a sentence states, and the answers train and check the heads.

`marks.py` keeps the answers (in the run directory, and as a CSV a team shares), `learner.py` turns them into
a sentence scorer per aspect on top of the aspect-file floor, `chooser.py` picks the sentences worth asking
about, and `loop.py` holds the three together behind `TeachLoop`, the loop a script or a widget drives.
"""
