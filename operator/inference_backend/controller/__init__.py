"""The control loop: the modules that know kopf, lightkube, asyncio or the clock.

The pure policy (render, status, capacity, rollout, pods, selection, engines, facts) sits outside this package and
never imports it. Here: ``handlers`` (thin kopf handlers), ``state`` (the one OperatorState in kopf's memo),
``world`` (the read model over kopf's indexes), ``reconcile`` (one level-triggered reconcile), ``kube`` (the API
client), ``workqueue``, ``nodewatch``, ``metrics`` and ``run`` (`inference-backend operator`).
"""
