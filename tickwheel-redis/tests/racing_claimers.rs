//! 8 members race to claim each of 1 000 offers: exactly one wins each time.

mod support;

use tickwheel_redis::{Effect, Error, Rejection, State, Token};
use tokio::task::JoinSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_one_claimer_wins_each_offer() {
    let Some((server, [source])) = support::with_members(["source"]).await else {
        return;
    };
    let mut claimers = Vec::new();
    for i in 0..8 {
        claimers.push(support::member(&server, &format!("claimer{i}")).await);
    }
    let offers: usize = std::env::var("TICKWHEEL_RACE_OFFERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let mut wins = vec![0usize; claimers.len()];
    for round in 0..offers {
        let queue = format!("race-{round}").into_bytes();
        let owned = source
            .acquire(&queue, &Token::generate())
            .await
            .expect("acquire");
        let epoch = owned.record.epoch;
        source
            .prepare(&queue, epoch, None, &Token::generate())
            .await
            .expect("prepare");
        source
            .seal(&queue, epoch, 0, 0, &Token::generate())
            .await
            .expect("seal");
        let mut set = JoinSet::new();
        // Spawned in a rotating order, so no claimer always starts first.
        for k in 0..claimers.len() {
            let i = (k + round) % claimers.len();
            let (c, queue) = (claimers[i].clone(), queue.clone());
            set.spawn(async move { (i, c.claim(&queue, &Token::generate()).await) });
        }
        let mut winner = None;
        let mut losers = Vec::new();
        while let Some(joined) = set.join_next().await {
            let (i, result) = joined.expect("task");
            match result {
                Ok(a) => {
                    assert_eq!(
                        (a.effect, a.record.state, a.record.epoch),
                        (Effect::Changed, State::Claimed, epoch + 1)
                    );
                    assert!(winner.replace(i).is_none(), "round {round}: two winners");
                }
                Err(Error::Rejected(r)) => match *r {
                    Rejection::NotOffered(record) => losers.push(record),
                    other => panic!("round {round}: {other:?}"),
                },
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        let Some(w) = winner else {
            panic!("round {round}: no winner")
        };
        wins[w] += 1;
        let name = claimers[w].member().name.clone();
        assert_eq!(losers.len(), claimers.len() - 1);
        // Each loser saw the winner's claim.
        assert!(
            losers
                .iter()
                .all(|r| r.owner.name == name && r.epoch == epoch + 1)
        );
    }
    assert_eq!(wins.iter().sum::<usize>(), offers);
    eprintln!("wins per claimer: {wins:?}");
}
