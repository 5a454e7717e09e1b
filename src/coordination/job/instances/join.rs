//! A worker joins: the first sets the job up on this sidecar, each registers its instance
//! node, and one whose stream ends before that leaves no instance behind.

use tracing::{info, warn};

use super::{Instances, Local, Phase};
use crate::coordination::events::{StreamEnd, WorkerEvent};
use crate::coordination::job::io::{Cx, Pending};
use crate::coordination::job::{Action, Input, Observation, Reply, StreamKey};
use crate::coordination::CoordError;
use crate::elasticjob::instance::instance_yaml;
use crate::registry::{CreateMode, Error as RegError, Op};

impl Instances {
    /// A worker subscribes. The first sets the job up (its config, the server node, the watch
    /// and the first read, [`Action::SetUp`]); others wait for that, then register.
    pub(in crate::coordination::job) fn join(&mut self, cx: &mut Cx, input: Input) {
        let Input::Join {
            reply,
            stream,
            ref instance_id,
            ref config,
            overwrite,
            max_concurrent,
        } = input
        else {
            return;
        };
        let refuse = |cx: &mut Cx, e: CoordError| {
            cx.reply(reply, Reply::Joined(Err(e)));
            cx.out.push(Action::EndStream { stream });
        };
        if self.drain.is_some() {
            let e = CoordError::Unavailable(
                "the sidecar is shutting down; subscribe to another".into(),
            );
            return refuse(cx, e);
        }
        if self.locals.contains_key(instance_id) {
            let e = CoordError::AlreadyExists(format!(
                "instance {instance_id} already has a live stream for job {}; pass another pid or instance_id",
                cx.name()
            ));
            return refuse(cx, e);
        }
        match self.phase {
            Phase::New => {
                self.phase = Phase::SettingUp;
                let op = cx.io.start_op(Pending::SetUp);
                cx.out.push(Action::SetUp {
                    op,
                    config: config.clone(),
                    overwrite,
                });
                self.joins_waiting.push(Input::Join {
                    reply,
                    stream,
                    instance_id: instance_id.clone(),
                    config: None,
                    overwrite: false,
                    max_concurrent,
                });
            }
            Phase::SettingUp => self.joins_waiting.push(input),
            Phase::Ready => {
                if !cx.connected() {
                    let e = CoordError::Unavailable(
                        "ZooKeeper is not connected; subscribe again shortly".into(),
                    );
                    return refuse(cx, e);
                }
                if let (Some(c), true) = (config, overwrite) {
                    let (config, extras) = c.as_ref();
                    for (path, data) in [
                        (cx.paths().config(), config.to_yaml()),
                        (cx.paths().shardcar(), extras.to_yaml()),
                    ] {
                        let op = cx.io.start_op(Pending::Persist);
                        cx.out.push(Action::Persist {
                            op,
                            path,
                            data: data.into_bytes(),
                        });
                    }
                }
                if let Err(e) = cx.effective_config() {
                    return refuse(cx, e);
                }
                let id = instance_id.clone();
                let local = Local::new(stream, reply, max_concurrent);
                self.locals.insert(id.clone(), Box::new(local));
                self.streams.insert(stream, id.clone());
                let ops = vec![Op::create(
                    cx.paths().instance(&id),
                    instance_yaml(&id, &cx.settings().ip),
                    CreateMode::Ephemeral,
                )];
                cx.commit(Pending::Register { instance_id: id }, ops, &[]);
            }
        }
    }

    /// The first setup is done (the mirror holds the subtree, `Ok`) or failed: the waiting
    /// joins go on, or are refused.
    pub(in crate::coordination::job) fn set_up(
        &mut self,
        cx: &mut Cx,
        result: Result<(), CoordError>,
    ) {
        let joins = std::mem::take(&mut self.joins_waiting);
        match result {
            Ok(()) => {
                self.phase = Phase::Ready;
                info!(job = %cx.name(), generation = cx.io.generation(), "job set up");
                for join in joins {
                    self.join(cx, join);
                }
            }
            Err(e) => {
                self.phase = Phase::New;
                warn!(job = %cx.name(), error = %e, "cannot set the job up");
                for join in joins {
                    if let Input::Join { reply, stream, .. } = join {
                        cx.reply(reply, Reply::Joined(Err(e.clone())));
                        cx.out.push(Action::EndStream { stream });
                    }
                }
            }
        }
    }

    /// A joining worker's instance node was written (or not).
    pub(in crate::coordination::job) fn registered(
        &mut self,
        cx: &mut Cx,
        id: &str,
        result: Result<(), RegError>,
    ) {
        let Some(local) = self.locals.get(id) else {
            return;
        };
        let (stream, reply) = (local.stream, local.join_reply);
        if let Err(e) = result {
            let error = match &e {
                RegError::MultiFailed { source, .. }
                    if matches!(**source, RegError::NodeExists(_)) =>
                {
                    CoordError::AlreadyExists(format!(
                        "instance {id} of job {} is already registered by another process; pass another pid or instance_id",
                        cx.name()
                    ))
                }
                _ => {
                    cx.write_failed("registering an instance", &e);
                    CoordError::Registry(e)
                }
            };
            if let Some(reply) = reply {
                cx.reply(reply, Reply::Joined(Err(error)));
            }
            self.locals.remove(id);
            self.streams.remove(&stream);
            cx.out.push(Action::EndStream { stream });
            return;
        }
        // ZooKeeper answers a create inside a multi without the node's stat: read the instance
        // node once, so that its creation's zxid is known exactly. Items handed to this
        // registration are told from those handed to an earlier one by it (adoptions).
        let path = cx.paths().instance(id);
        if !cx.mirror.exact(&path) {
            let op = cx.io.start_op(Pending::Read);
            cx.out.push(Action::Read { op, path });
        }
        let generation = cx.io.generation();
        let local = self.locals.get_mut(id).expect("checked above");
        local.registered = true;
        local.generation = generation;
        local.seen = true;
        local.join_reply = None;
        if local.gone.is_some() {
            // The stream ended while registering: leave as usual (reconcile).
            if let Some(reply) = reply {
                let e = CoordError::Unavailable("the stream ended while subscribing".into());
                cx.reply(reply, Reply::Joined(Err(e)));
            }
            return;
        }
        let (config, extras) = match cx.effective_config() {
            Ok(c) => c,
            Err(e) => {
                if let Some(reply) = reply {
                    cx.reply(reply, Reply::Joined(Err(e)));
                }
                self.end(cx, id, StreamEnd::ByWorker, false);
                return;
            }
        };
        cx.send(
            stream,
            WorkerEvent::Registered {
                instance_id: id.to_string(),
                config: Box::new((config.clone(), extras)),
            },
        );
        self.push_assignment(cx, id);
        if cx.may_grant() {
            self.grant(cx, id);
        }
        if let Some(reply) = reply {
            cx.reply(reply, Reply::Joined(Ok(Box::new(config))));
        }
        info!(job = %cx.name(), instance = %id, "worker subscribed");
        cx.observe(Observation::Worker { joined: true });
    }

    /// A worker's stream ended: the local instance to end, if it has one (a join still
    /// waiting for the job's setup is dropped here, or its instance would be created later for
    /// a stream that is already gone).
    pub(in crate::coordination::job) fn stream_ended(
        &mut self,
        cx: &mut Cx,
        stream: StreamKey,
        end: StreamEnd,
    ) -> Option<String> {
        let Some(id) = self.streams.get(&stream).cloned() else {
            let ended: Vec<Input> = self
                .joins_waiting
                .extract_if(
                    ..,
                    |j| matches!(j, Input::Join { stream: s, .. } if *s == stream),
                )
                .collect();
            for join in ended {
                if let Input::Join { reply, .. } = join {
                    info!(job = %cx.name(), stream, ?end, "a subscribe ended before its instance existed");
                    let error =
                        CoordError::Unavailable("the stream ended while subscribing".into());
                    cx.reply(reply, Reply::Joined(Err(error)));
                    cx.out.push(Action::EndStream { stream });
                }
            }
            return None;
        };
        self.locals
            .get(&id)
            .is_some_and(|l| l.gone.is_none())
            .then_some(id)
    }
}

/// What the job's setup does about its config, decided from the config node it found
/// (`existing`), the config the first worker brought and whether it may overwrite one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ConfigSetup {
    /// Write the worker's config (the job has none, or the worker overwrites it), as
    /// ElasticJob's `setUpJobConfiguration` does.
    Write,
    /// Keep the one there: the server is marked enabled or disabled as it says.
    Keep { disabled: bool },
}

impl ConfigSetup {
    /// # Errors
    /// `NotFound` for a job with no config when the worker brought none; `FailedPrecondition`
    /// for a config node that cannot be read as one.
    pub(crate) fn decide(
        job: &str,
        existing: Option<&[u8]>,
        brought: bool,
        overwrite: bool,
    ) -> Result<ConfigSetup, CoordError> {
        match (existing, brought) {
            (None, false) => Err(CoordError::NotFound(format!(
                "job {job} does not exist; subscribe with a config to create it"
            ))),
            (None, true) => Ok(ConfigSetup::Write),
            (Some(_), true) if overwrite => Ok(ConfigSetup::Write),
            (Some(data), _) => {
                let config =
                    crate::elasticjob::config::JobConfiguration::from_yaml(data).map_err(|e| {
                        CoordError::FailedPrecondition(format!(
                            "the config of job {job} in the registry is unreadable: {e}"
                        ))
                    })?;
                Ok(ConfigSetup::Keep {
                    disabled: config.disabled,
                })
            }
        }
    }
}
