"""The batch layer, above the policy core: queues and quotas (`queues`), the `Statement`
(`statement`), jobs and gangs (`jobs`), preemption and reclaim (`preempt`), consolidation
(`consolidate`) and batch scenarios (`scenario`).

The core (`engine.*` outside this package) imports nothing from here; this layer decides
with the core's `Scheduler` and reads the core's decisions.
"""
