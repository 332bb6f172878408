//! The head of every stream: the shard's source indices in reading order.

use super::{FilterOracle, Stream, mismatch, next_state};
use crate::input::error::Result;
use crate::input::shard::ShardIds;
use crate::input::state::StageState;

pub(crate) struct SourceStream {
    ids: ShardIds,
    position: u64,
}

impl SourceStream {
    pub fn new(ids: ShardIds) -> Self {
        SourceStream { ids, position: 0 }
    }
}

impl Stream<u64> for SourceStream {
    fn next(&mut self, _: &mut dyn FilterOracle) -> Result<Option<u64>> {
        let id = self.ids.get(self.position);
        if id.is_some() {
            self.position += 1;
        }
        Ok(id)
    }

    fn reset(&mut self, _epoch: u64) {
        self.position = 0;
    }

    fn save(&self, out: &mut Vec<StageState>) {
        out.push(StageState::Source { position: self.position });
    }

    fn load(&mut self, states: &mut std::slice::Iter<'_, StageState>) -> Result<()> {
        match next_state(states, "source")? {
            &StageState::Source { position } if position <= self.ids.len() => {
                self.position = position;
                Ok(())
            }
            other => Err(mismatch(&format!("a source position within {} examples", self.ids.len()), other)),
        }
    }
}
