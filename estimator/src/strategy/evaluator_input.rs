//! Tests: the evaluator task of a cluster reads the whole evaluation input under every strategy
//! that spans processes: it is no training pipeline, so the workers' sharding must not
//! apply to it (sharded, it evaluated 5,000 of Fashion-MNIST's 10,000 test examples and
//! reported that as the model's accuracy).

#[cfg(test)]
mod tests {
    use crate::input::InputContext;
    use crate::strategy::{
        Strategy, StrategyOptions, multi_worker::MultiWorkerStrategy, parameter_server::ParameterServerStrategy,
    };
    use engine_runtime::cluster::{Cluster, ClusterSource, ClusterSpec, TaskId, TaskType};

    fn options(ps: usize, task: TaskId) -> StrategyOptions {
        let spec = ClusterSpec {
            chief: Vec::new(),
            worker: vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()],
            ps: (0..ps).map(|i| format!("127.0.0.1:{}", 10 + i)).collect(),
            evaluator: vec!["127.0.0.1:3".into()],
        };
        let cluster = Cluster::new(spec, task, ClusterSource::Flags, None).ok();
        StrategyOptions { cluster, ..StrategyOptions::default() }
    }

    #[test]
    fn the_evaluator_reads_everything_and_workers_their_shard() -> crate::Result<()> {
        let evaluator = TaskId { task_type: TaskType::Evaluator, index: 0 };
        let worker = TaskId { task_type: TaskType::Worker, index: 1 };
        let ps = ParameterServerStrategy::new(&options(1, evaluator))?;
        assert_eq!(ps.input_context(), InputContext::default());
        let ps = ParameterServerStrategy::new(&options(1, worker))?;
        assert_eq!(
            ps.input_context(),
            InputContext { num_input_pipelines: 2, input_pipeline_id: 1, num_replicas_in_sync: 2 }
        );
        let mw = MultiWorkerStrategy::new(&options(0, evaluator))?;
        assert_eq!(mw.input_context(), InputContext::default());
        let mw = MultiWorkerStrategy::new(&options(0, worker))?;
        assert_eq!(mw.input_context().num_input_pipelines, 2);
        Ok(())
    }
}
