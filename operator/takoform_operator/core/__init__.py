"""The operator's pure core: codecs, registry, import ids and reconcile decisions; no I/O.

Pure: no kopf, no I/O, no clock. One reconcile turns recorded state + desired spec + what the
host said into the next state and an outcome, in steps:

    plan()        which operation to consult and which exact resource to read (or stop early)
                  (core.plan)
    decide()      what those two answers allow us to conclude, and at most ONE mutation
                  (core.decide; the mutations are core.actions)
    accepted()    the state to persist once the host accepted that mutation (202 + operation)
                  (core.host_answer)
    rejected()    the state to persist when the host refused it (core.host_answer)

Each step returns an Outcome (core.outcome). The adapter (takoform_operator.service) performs
the reads and the mutation in between and persists the returned state. Every mutation carries an
idempotency key (core.keys) the next reconcile can recompute from what is already persisted,
which is what makes a crash between the host's 202 and the status write harmless
(docs/crash-safety.md).
"""
