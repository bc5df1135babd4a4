//! Messages routed to the scheduler: a node's status and STATS, a controller's START (placed, or
//! refused with the scheduler's own START_FAILURE), frames addressed to a node or a CNCI, and
//! CONFIGURE.

use ssntp::frame::Frame;
use ssntp::payload::{GroupPolicy, NodeState, Start, StartFailure, StartFailureReason};
use ssntp::session::Message;
use ssntp::{Payload, Role, Uuid};
use ssntp_net::{Directory, Route, Target};
use std::time::{Duration, Instant};

use super::driver::Action;
use super::state::Cluster;
use crate::placement::Members;

/// `frame` with a payload of its own: a received payload may share a larger read buffer, which
/// a frame kept for long must not hold on to.
fn kept(mut frame: Frame) -> Frame {
    frame.payload = frame.payload.to_vec().into();
    frame
}

impl Cluster {
    /// A message routed to the scheduler (the rest is forwarded by the SSNTP server's rules);
    /// `directory` says who is connected, for frames addressed to a node or a CNCI.
    pub fn message(
        &mut self,
        from: Uuid,
        role: Role,
        message: Message,
        now: Instant,
        directory: &dyn Directory,
    ) -> Vec<Action> {
        let mut first_status = None;
        if let Some(node) = self.nodes.get_mut(&from) {
            node.last_seen = now;
            if !node.announced
                && matches!(
                    message.payload,
                    Payload::Ready(_)
                        | Payload::Full(_)
                        | Payload::Maintenance(_)
                        | Payload::Offline(_)
                )
            {
                node.announced = true;
                first_status = Some(node.role);
            }
        }
        let update = match &message.payload {
            Payload::Ready(n) => Some((NodeState::Ready, Some(n))),
            Payload::Full(n) => Some((NodeState::Full, n.as_ref())),
            Payload::Maintenance(n) => Some((NodeState::Maintenance, n.as_ref())),
            Payload::Offline(n) => Some((NodeState::Offline, n.as_ref())),
            _ => None,
        };
        if let Some((state, figures)) = update {
            self.placement.update(from, state, figures);
            // A node is announced to the controllers once it can be placed on (or is known
            // not to take work): a controller that hears of it can send it work at once.
            return first_status.map_or_else(Vec::new, |role| self.node_events(from, role, true));
        }
        if role.contains(Role::CONTROLLER) && message.payload.addressee().is_some() {
            return match crate::routes::to_addressee(&message.payload, directory) {
                Route::To(target) => {
                    vec![Action::Forward {
                        from,
                        frame: message.frame,
                        to: Target::Session(target),
                    }]
                }
                Route::Fail { reason, target } => {
                    vec![Action::Fail {
                        to: from,
                        frame: message.frame,
                        reason,
                        target,
                    }]
                }
                _ => Vec::new(),
            };
        }
        match message.payload {
            // Forwarded to controllers by the readers already; here it shows life, and is kept
            // for controllers that connect later.
            Payload::Stats(_) => {
                if let Some(node) = self.nodes.get_mut(&from) {
                    node.stats = Some(kept(message.frame));
                }
                Vec::new()
            }
            Payload::Start(start) if role.contains(Role::CONTROLLER) => {
                self.start(from, *start, message.frame, now)
            }
            Payload::Configure(config) if role.contains(Role::CONTROLLER) => {
                self.config = self.told(*config);
                vec![Action::Configure(Box::new(self.config.clone()))]
            }
            other => {
                tracing::debug!(%from, operand = %other.operand(), "consumed");
                Vec::new()
            }
        }
    }

    fn start(&mut self, from: Uuid, start: Start, frame: Frame, now: Instant) -> Vec<Action> {
        if let Err(why) = start.requirements.check() {
            tracing::warn!(%from, instance = %start.instance_uuid, %why, "START refused");
            return vec![self.refuse(from, &start, StartFailureReason::InvalidData)];
        }
        if start.restart {
            // Kept stopped on its node: it goes back there, nothing reserved.
            return match self.placement.place_restart(&start.requirements) {
                Ok(node) => vec![Action::Forward {
                    from,
                    frame,
                    to: Target::Session(node),
                }],
                Err((reason, why)) => {
                    self.metrics.placed(&Err::<(), _>(reason), Duration::ZERO);
                    vec![self.refuse_with(from, &start, reason, Some(why))]
                }
            };
        }
        let timer = Instant::now();
        let placed = self.place(&start, None, now);
        if let (Ok(node), Some(group)) = (&placed, &start.requirements.group) {
            self.groups
                .remember(group.id, start.instance_uuid, *node, now);
        }
        self.metrics.placed(&placed, timer.elapsed());
        match placed {
            Ok(node) => vec![Action::Forward {
                from,
                frame,
                to: Target::Session(node),
            }],
            Err(reason) => {
                vec![self.refuse(from, &start, reason)]
            }
        }
    }

    /// Places `start` (never on `exclude`), its server group weighed: the nodes the sender
    /// knows its fellow members on, and those the scheduler placed the others on lately.
    fn place(
        &mut self,
        start: &Start,
        exclude: Option<Uuid>,
        now: Instant,
    ) -> Result<Uuid, StartFailureReason> {
        let req = &start.requirements;
        let Some(group) = &req.group else {
            return self.placement.place_excluding(req, exclude);
        };
        // Checked with the rest of the requirements.
        let policy = group
            .policy()
            .map_err(|_| StartFailureReason::InvalidData)?;
        let mut nodes = group.nodes.clone();
        nodes.extend(self.groups.nodes_of(group.id, &group.members, now));
        let members = Members {
            policy,
            nodes: &nodes,
        };
        self.placement.place_with(req, exclude, Some(members))
    }

    /// The scheduler's own START_FAILURE for `start`, to the controller that sent it.
    fn refuse(&self, from: Uuid, start: &Start, reason: StartFailureReason) -> Action {
        self.refuse_with(from, start, reason, None)
    }

    /// As [`Cluster::refuse`], with `why` in words when the scheduler knows it.
    fn refuse_with(
        &self,
        from: Uuid,
        start: &Start,
        reason: StartFailureReason,
        why: Option<String>,
    ) -> Action {
        // A strict group policy may be what left no node: say so when a node could have taken
        // the START but for it (a plain `full_cloud` otherwise).
        let message = why.or_else(|| match (&start.requirements.group, reason) {
            (Some(group), StartFailureReason::FullCloud)
                if matches!(
                    group.policy(),
                    Ok(GroupPolicy::Affinity | GroupPolicy::AntiAffinity)
                ) && self.placement.could_take(&start.requirements) =>
            {
                Some(format!(
                    "no node with room satisfies the {} policy of server group {}",
                    group.policy, group.id
                ))
            }
            _ => None,
        });
        let failure = StartFailure {
            instance_uuid: start.instance_uuid,
            node_uuid: None,
            reason,
            restart: start.restart,
            message,
        };
        Action::Send {
            to: from,
            frame: Frame::new(self.uuid, &Payload::StartFailure(failure)),
        }
    }

    /// A placed START its node could not take (its queue was full, or it just left): give the
    /// reservation back and place it on another node, or answer `full_cloud`.
    pub fn start_undelivered(&mut self, from: Uuid, node: Uuid, frame: Frame) -> Vec<Action> {
        let Ok(Payload::Start(start)) = frame.decode_payload() else {
            return Vec::new();
        };
        if start.restart {
            // Its node, the only one that keeps it, just left or is swamped: nothing was
            // reserved, and no other node can boot it.
            self.metrics
                .placed(&Err::<(), _>(StartFailureReason::FullCloud), Duration::ZERO);
            let why = format!("node {node}, which keeps the instance, could not take the START");
            return vec![self.refuse_with(from, &start, StartFailureReason::FullCloud, Some(why))];
        }
        self.placement.release(node, &start.requirements);
        // The memory's clock is not needed to read it again: its entries for this START's
        // fellows were fresh a moment ago, and this START's own entry moves with it.
        match self.place(&start, Some(node), Instant::now()) {
            Ok(other) => {
                if let Some(group) = &start.requirements.group {
                    self.groups.moved(group.id, start.instance_uuid, other);
                }
                vec![Action::Forward {
                    from,
                    frame,
                    to: Target::Session(other),
                }]
            }
            Err(reason) => {
                self.metrics.placed(&Err::<(), _>(reason), Duration::ZERO);
                vec![self.refuse(from, &start, reason)]
            }
        }
    }
}
