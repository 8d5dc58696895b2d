"""One-off measurements: each answers one question that a page of docs/ cites, with its date.

`python -m benchmark.oneoff.<module>`; benchmark/README.md lists them, with what each measures
and where its figures are reported. None of them is part of `python -m benchmark`.
"""
