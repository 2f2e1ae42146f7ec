"""Pure accounting: the ledger per attempt (``ledger``), accrual from what ran (``accrual``),
the durable rollup of ended attempts and deleted jobs (``rollup``), team spend against budgets
(``teamspend``) and the report rows (``costreport``). No I/O: the engine's accountant applies it."""
