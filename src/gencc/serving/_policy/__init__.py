"""Serving's dispatch policies (private: `gencc.serving` exports what users build on; the extension API they are
written against, `Dispatcher`, `Request`, `Env` and `RollingQuantile`, is the public `gencc.serving.dispatch`).

dispatchers (the uncoded, replicated and hedged policies), coded (CodedDispatcher: groups, systematic dispatch,
early decode), checked (CheckedDispatcher: answers after a wrong-result check), result_check, slots (what each
worker slot of a code computes), gate and gate_threshold (decoded answers held back unless likely right, and the
threshold's calibration), loop_env (a dispatcher on the HTTP door's event loop), sim (serving load in virtual
time).
"""
