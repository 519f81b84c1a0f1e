"""How a run executes a step's rollout and update: in this process (``local``), with
generation one step ahead (``asynchronous``), on Ray worker groups (``remote``), and the chooser
(``choose``)."""
