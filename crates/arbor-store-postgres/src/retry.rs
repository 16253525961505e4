//! Running an operation again: after PostgreSQL aborted its transaction to break a deadlock
//! or a serialization conflict, and after the connection was lost (the server restarted or
//! failed over, the network broke) before the transaction's `COMMIT` was sent, when the
//! server has rolled it back and running it again cannot apply it twice.
//!
//! A connection lost *while* committing leaves the outcome unknown: that write is not run
//! again, and fails with `Unavailable` saying so. Getting a new connection waits up to the
//! pool's acquire timeout for the server to take connections again (sqlx retries a refused
//! connection and a server still starting up), so an outage shorter than that is ridden out.

use std::time::Duration;

use sqlx::{Postgres, Transaction};

use crate::error::{Failure, OpResult, connection_lost, retryable};

/// How many times a transaction aborted by a deadlock or a serialization conflict runs.
const CONFLICT_ATTEMPTS: u32 = 8;

/// How many times an operation whose connection was lost runs.
const LOST_ATTEMPTS: u32 = 6;

/// Commits `tx`; a failure is a [`Failure::Commit`], whose outcome may be unknown.
pub(crate) async fn commit(tx: Transaction<'_, Postgres>) -> OpResult<()> {
    tx.commit().await.map_err(Failure::Commit)
}

/// Ends `tx` by what its body gave: commits it after `Ok`; rolls it back at once after an
/// error. A transaction merely dropped is rolled back only when its connection is next used,
/// and keeps its row locks until then (a `SKIP LOCKED` claim passed over a run queued again
/// right after a refused enqueue had locked its row).
pub(crate) async fn settle<T>(tx: Transaction<'_, Postgres>, out: OpResult<T>) -> OpResult<T> {
    match out {
        Ok(value) => {
            commit(tx).await?;
            Ok(value)
        }
        Err(failure) => {
            if let Err(e) = tx.rollback().await {
                tracing::debug!(error = %e, "rollback failed; the connection is dropped");
            }
            Err(failure)
        }
    }
}

/// How long to wait before running again an operation on the server `shown` that failed
/// with `failure` on attempt `attempt` (from 1); `None` when it must not run again.
pub(crate) fn again(shown: &str, failure: &Failure, attempt: u32) -> Option<Duration> {
    let (err, committing) = match failure {
        Failure::Store(_) => return None,
        Failure::Sql(err) => (err, false),
        Failure::Commit(err) => (err, true),
    };
    if retryable(err) && attempt < CONFLICT_ATTEMPTS {
        tracing::debug!(store = %shown, attempt, %err, "transaction run again");
        return Some(Duration::from_millis(u64::from(attempt) * 2));
    }
    if !committing && connection_lost(err) && attempt < LOST_ATTEMPTS {
        tracing::warn!(store = %shown, attempt, %err, "connection lost; running the operation again");
        return Some(Duration::from_millis(u64::from(attempt) * 100));
    }
    None
}

/// Runs `$op` (an `async` block evaluating to an [`OpResult`], made anew for each attempt) on
/// `$store` until it succeeds or fails for good, then maps its failure onto a `StoreError`.
macro_rules! retrying {
    ($store:expr, $op:expr) => {{
        let store = $store;
        let mut attempt: u32 = 1;
        loop {
            let out: $crate::error::OpResult<_> = $op.await;
            match out {
                Err(failure) => match $crate::retry::again(store.server(), &failure, attempt) {
                    Some(wait) => {
                        tokio::time::sleep(wait).await;
                        attempt += 1;
                    }
                    None => break store.finish_op(Err(failure)),
                },
                ok => break store.finish_op(ok),
            }
        }
    }};
}

pub(crate) use retrying;

#[cfg(test)]
mod tests {
    use crate::error::connection_lost;

    #[test]
    fn a_lost_connection_is_told_from_other_failures() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(connection_lost(&io));
        assert!(connection_lost(&sqlx::Error::Protocol("eof".into())));
        assert!(!connection_lost(&sqlx::Error::PoolTimedOut));
        assert!(!connection_lost(&sqlx::Error::RowNotFound));
        assert!(!connection_lost(&sqlx::Error::ColumnNotFound("x".into())));
    }
}
