//! One delegation, in the order it runs, as the values of [`pipeline`] hand it over:
//! [`delegate`] admits a request (the allow-list, cycles, policy, limits, depth and input
//! checks, a slot from [`slots`](crate::supervisor::tree::slots)); [`register`] writes the
//! child's record; [`work`] runs the
//! `before` hook, the factory and the child's run (with [`pump`] relaying its events);
//! [`terminal`] writes the one terminal report (events, the `after` hook, the
//! [`summary`](crate::supervisor::tree::summary) counters), with the parent's view of the
//! answer from [`answer`]; [`resume`] runs what follows a child's run (notices, wake-ups, follow-up
//! runs). Async handles live in [`handles`](crate::supervisor::tree::handles) and [`join`]; suspended children are rebuilt by
//! [`nested`] (under a waiting parent) and [`detached`] (nobody waits), [`suspended`] lists
//! them, typed, and [`decide`] routes a decision to the one record of its call; [`depth`]
//! keeps a session's lowered depth limit; [`remote`] hands a run to another process and runs
//! one another process handed over; [`stored`] rebuilds a delegation from a child's record
//! (a worker's claimed run, a follow-up, a continued run).

pub(crate) mod abandoned;
pub(crate) mod admitted;
pub(crate) mod answer;
pub(crate) mod budget;
pub(crate) mod decide;
pub(crate) mod delegate;
pub(crate) mod depth;
pub(crate) mod detached;
pub(crate) mod join;
pub(crate) mod nested;
pub(crate) mod pipeline;
pub(crate) mod pump;
pub(crate) mod register;
pub(crate) mod remote;
pub(crate) mod resume;
pub(crate) mod stored;
pub(crate) mod suspended;
pub(crate) mod terminal;
pub(crate) mod work;
