"""File names that more than one layer reads or writes: what ``--emit`` writes (``advisor.app``) and the training
callback reads (``advisor.integrations``)."""

#: The recommendation an ``--emit`` set was made from, beside its configs: what ``advisor.integrations`` checks a
#: training run against.
PLAN_FILE = "plan.json"
