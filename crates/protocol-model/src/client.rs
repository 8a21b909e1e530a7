// SPDX-License-Identifier: GPL-2.0

//! peermem-rs: its acquire, the glue driving `peermem_logic::registration` for each actor, and
//! the glue's calls that wrap driver calls under `N_PINS`; and the second registration's pins.

use peermem_logic::errno::Errno;
use peermem_logic::registration::{self as reg, Actor, Commit, HostCall, Op, Step};

use crate::{range, Bug, Client, DOp, Frame, InvalidateStep, Pin, Tid, World, EINVAL};

/// A frame of peermem-rs code.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Ours {
    /// The fixed client's acquire (`N_PINS` around its persistent pin, for the fixed client).
    Acquire(CallStep),
    /// The fixed client's glue running the state machine for an actor.
    Run {
        actor: Actor,
        call: Option<HostCall>,
        pc: RunPc,
    },
    /// The glue with rule 2 broken (`Client::TrustsForeignPut`): put_pages of N from a task that
    /// is not the owner, its 0 taken as the unpin.
    TrustForeignPut(CallStep),
    /// The glue's `Op::PinN` (`N_PINS` around get_pages, for the fixed client).
    PinN(CallStep),
    /// The glue's `Op::UnpinN` (`N_PINS`, then "still Unpinning?", for the fixed client).
    UnpinN(CallStep),
    /// The glue's `Op::ProveUnpinN` ("still Proving?", then a persistent pin of the first page and
    /// its unpin; `N_PINS` around it all for the fixed client).
    ProveUnpinN(ProofStep),
    /// Acquire of a range registered again, adopting (`Config::adopt`).
    Adopt(AdoptStep),
}

/// Acquire of a range registered again (src/client.rs): its persistent pin made (under `N_PINS`
/// for the clients that take it, not the fixed one), then, under the registration lock, the
/// lingering registration taken over, or the pin unpinned and the registration refused.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum AdoptStep {
    Pinned,
    Unpinned,
}

impl AdoptStep {
    pub fn what(self) -> &'static str {
        match self {
            Self::Pinned => "get_pages_persistent returned (N_PINS dropped where the client takes it); lock: adopt the lingering registration, or unpin and refuse",
            Self::Unpinned => "nothing to adopt: put_pages_persistent returned; refuse",
        }
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RunPc {
    Begin,
    Next,
    Await(Op),
    /// release: drop the host's reference, then return.
    DropHostRef,
    Return(Result<(), Errno>),
}

/// A glue call of peermem-rs around one driver call (acquire, `Op::PinN`, `Op::UnpinN`): entered,
/// or back from the driver.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum CallStep {
    Enter,
    Returned,
}

/// The glue's `Op::ProveUnpinN`: entered, back from the proof's pin, back from its unpin.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ProofStep {
    Enter,
    Pinned,
    Unpinned,
}

/// The second registration's acquire (its P) and `Op::PinN` (its N).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum SecondPinStep {
    PinP,
    PinnedP,
    PinN,
    PinnedN,
}

impl World {
    /// acquire (src/client.rs): `N_PINS` around `PersistentPin::get` (the fixed client only), then
    /// the registration created.
    pub(crate) fn fixed_acquire(&mut self, tid: Tid, pc: CallStep) -> Option<()> {
        self.our_code(false, "");
        match pc {
            CallStep::Enter if self.module_going => {
                // `ModuleRef::get` (try_module_get) fails once rmmod got past try_stop_module:
                // refused before any pin (only a registration after another, `Config::adopt`,
                // gets here: the first one is asked before rmmod can get that far).
                self.ret(tid, Err(EINVAL));
            }
            CallStep::Enter if self.cfg.adopt && self.ctx_created => {
                // The range registered again: the acquire (src/client.rs) (`adopting_acquire`).
                self.enter_n_pins(tid, self.models_n_pins_around_p())?;
                self.set_pc(tid, Frame::Ours(Ours::Adopt(AdoptStep::Pinned)));
                self.call_driver(tid, DOp::PinPAgain);
            }
            CallStep::Enter => {
                self.enter_n_pins(tid, self.models_n_pins_around_p())?;
                self.set_pc(tid, Frame::Ours(Ours::Acquire(CallStep::Returned)));
                self.call_driver(tid, DOp::PinP);
            }
            CallStep::Returned => match self.take_ret(tid)? {
                Err(e) => {
                    self.leave_n_pins(tid);
                    self.ret(tid, Err(e));
                }
                Ok(()) => {
                    self.leave_n_pins(tid);
                    let state = reg::Registration::acquired(
                        self.cfg.flavour,
                        range(),
                        self.threads[tid].tgid,
                    );
                    self.state = Some(if self.cfg.client.proves_unpin() {
                        state.proving_then_unpinning()
                    } else {
                        state
                    });
                    self.ctx_created = true;
                    self.refs = 1;
                    self.ret(tid, Ok(()));
                }
            },
        }
        Some(())
    }

    /// Acquire of the range registered again (`Config::adopt`; src/client.rs), after its persistent
    /// pin: under the registration lock (the registration is found only while it lives: the
    /// module's table of lingering registrations loses it when its last reference goes), adopt it
    /// if `Registration::adoptable` says so, the new pin becoming its P and the host's new
    /// reference one more; else unpin the new pin and refuse.
    pub(crate) fn adopting_acquire(&mut self, tid: Tid, pc: AdoptStep) -> Option<()> {
        match pc {
            AdoptStep::Pinned => {
                let r = self.take_ret(tid)?;
                self.our_code(false, "");
                self.leave_n_pins(tid);
                if let Err(e) = r {
                    self.ret(tid, Err(e));
                    return Some(());
                }
                let tgid = self.threads[tid].tgid;
                let adoptable = self.ctx_alive()
                    && self
                        .state
                        .as_ref()
                        .is_some_and(|st| st.adoptable(range(), tgid));
                if adoptable {
                    if !(self.n.tracked && self.n.armed && self.n.table_alive) {
                        self.bug(Bug::AdoptedDeadN);
                    }
                    debug_assert!(!self.p.tracked, "the lingering registration's P is gone");
                    self.state.as_mut().unwrap().adopt(range());
                    self.p = self.p_again;
                    self.p_again = Pin::default();
                    self.refs += 1;
                    self.adopted = true;
                    self.ret(tid, Ok(()));
                } else {
                    self.set_pc(tid, Frame::Ours(Ours::Adopt(AdoptStep::Unpinned)));
                    self.call_driver(tid, DOp::UnpinPAgain);
                }
            }
            AdoptStep::Unpinned => {
                self.returned(tid)?;
                self.our_code(false, "");
                self.ret(tid, Err(EINVAL));
            }
        }
        Some(())
    }

    pub(crate) fn fixed_run(
        &mut self,
        tid: Tid,
        actor: Actor,
        call: Option<HostCall>,
        pc: RunPc,
    ) -> Option<()> {
        let set = |w: &mut World, pc| {
            w.set_pc(tid, Frame::Ours(Ours::Run { actor, call, pc }));
        };
        match pc {
            RunPc::Return(r) => {
                self.our_code(false, "");
                self.ret(tid, r);
                return Some(());
            }
            RunPc::DropHostRef => {
                self.our_code(true, "release");
                self.drop_ref();
                set(self, RunPc::Return(Ok(())));
                return Some(());
            }
            _ => {}
        }
        self.our_code(true, "a step of the registration");
        let tgid = self.threads[tid].tgid;
        // The client of today asks for the first step under the hold that began the actor, and
        // for the next step under the hold that reported a call's result (`RegCtx::drive`); the
        // older clients took the lock again for each.
        let one_hold = self.one_hold();
        let st = self.state.as_mut().expect("registration");
        match pc {
            RunPc::Begin => {
                match actor {
                    Actor::Host => {
                        if st.begin(call.unwrap(), tgid).is_err() {
                            set(self, RunPc::Return(Err(EINVAL)));
                            return Some(());
                        }
                    }
                    Actor::Callback => {
                        if !st.begin_callback() {
                            set(self, RunPc::Return(Ok(())));
                            return Some(());
                        }
                    }
                    Actor::Work => st.begin_work(),
                }
                if !one_hold {
                    set(self, RunPc::Next);
                    return Some(());
                }
            }
            RunPc::Await(op) => {
                let r = self.take_ret(tid)?;
                let st = self.state.as_mut().unwrap();
                let commit = st.done(actor, op, r);
                debug_assert!(matches!(commit, Commit::Nothing | Commit::PublishSg));
                if !one_hold {
                    set(self, RunPc::Next);
                    return Some(());
                }
            }
            RunPc::Next => {}
            RunPc::Return(_) | RunPc::DropHostRef => unreachable!(),
        }
        // Asked again after a step that makes no call (a note, queueing the work item, dropping
        // the driver's reference), unless the step below says otherwise.
        set(self, RunPc::Next);
        let st = self.state.as_mut().unwrap();
        match st.next(actor) {
            Step::Call(op) => {
                set(self, RunPc::Await(op));
                match op {
                    Op::PinN => self.push(tid, Frame::Ours(Ours::PinN(CallStep::Enter))),
                    Op::UnpinN => self.push(tid, Frame::Ours(Ours::UnpinN(CallStep::Enter))),
                    Op::MapP => self.call_driver(tid, DOp::Map(!self.maps_n())),
                    Op::UnmapP => self.call_driver(tid, DOp::Unmap(!self.maps_n())),
                    Op::UnpinP => self.call_driver(tid, DOp::UnpinP),
                    Op::FillSg => {
                        let mapped = if self.maps_n() { self.n } else { self.p };
                        if !(mapped.table_alive && mapped.mapped) {
                            self.bug(Bug::DriverUseAfterFree(
                                "the SG list was filled from a dead DMA mapping",
                            ));
                        }
                        self.threads[tid].ret = Some(Ok(()));
                    }
                    Op::Invalidate => {
                        self.push(tid, Frame::HostInvalidate(InvalidateStep::Lookup));
                    }
                    Op::DriverBarrier => self.call_driver(tid, DOp::Barrier),
                    Op::ProveUnpinN => {
                        if self.cfg.client == Client::TrustsUnpin {
                            // The glue of b477f12 had no proof: the owner's 0 was the unpin.
                            self.threads[tid].ret = Some(Ok(()));
                        } else {
                            self.push(tid, Frame::Ours(Ours::ProveUnpinN(ProofStep::Enter)));
                        }
                    }
                }
            }
            Step::DropDriverRef => self.drop_ref(),
            Step::HandDriverRefToWork if self.cfg.client == Client::DropsRefInCallback => {
                // Rule 4 broken: the callback drops the driver's reference itself (maybe the
                // last one, and with it the module reference) and then returns, in module code.
                self.drop_ref();
                set(self, RunPc::Return(Ok(())));
            }
            Step::HandDriverRefToWork => {
                if self.wq_queued {
                    // Already queued: the queued item holds a reference; drop the driver's.
                    self.drop_ref();
                } else {
                    self.wq_queued = true;
                }
                // The callback returns at once, without touching the registration again.
                set(self, RunPc::Return(Ok(())));
            }
            Step::QueueWork => {
                if !self.wq_queued {
                    self.wq_queued = true;
                    self.refs += 1;
                }
            }
            Step::Note(reg::Event::UnpinNForeign)
                if self.cfg.client == Client::TrustsForeignPut =>
            {
                // Rule 2 broken: put_pages of N from this task all the same.
                self.push(tid, Frame::Ours(Ours::TrustForeignPut(CallStep::Enter)));
            }
            Step::Note(_) => {}
            Step::Return(r) => {
                let r = r.map_err(|refusal| refusal.errno);
                if call == Some(HostCall::Release) {
                    set(self, RunPc::DropHostRef);
                } else {
                    set(self, RunPc::Return(r));
                }
            }
        }
        Some(())
    }

    /// Does the client's glue take `N_PINS` around its pins and unpins of N? Not the fixed client
    /// (and its variants): it unpins no pin by its table's address, so it has no such lock.
    pub(crate) fn models_n_pins(&self) -> bool {
        matches!(
            self.cfg.client,
            Client::UnlockedP | Client::TrustsUnpin | Client::ProvesUnpin
        )
    }

    /// Does the glue map N's table where the state machine says P (`Client::MapsN`; N exists in
    /// the invalidating flavour only)?
    pub(crate) fn maps_n(&self) -> bool {
        self.cfg.client == Client::MapsN && self.invalidating()
    }

    /// The glue with rule 2 broken (`Client::TrustsForeignPut`): put_pages of N from the
    /// deregistering task, which is not the owner, and its 0 taken as the unpin: the driver's
    /// reference dropped, though the driver still holds N and our data.
    pub(crate) fn trust_foreign_put(&mut self, tid: Tid, pc: CallStep) -> Option<()> {
        match pc {
            CallStep::Enter => {
                self.our_code(true, "put_pages of N");
                let key = self.n_key.unwrap_or_default();
                self.set_pc(tid, Frame::Ours(Ours::TrustForeignPut(CallStep::Returned)));
                self.call_driver(tid, DOp::UnpinN { key });
            }
            CallStep::Returned => {
                let r = self.take_ret(tid)?;
                self.our_code(true, "put_pages of N");
                if r.is_ok() {
                    self.drop_ref();
                }
                self.ret(tid, Ok(()));
            }
        }
        Some(())
    }

    /// Does the glue ask for the next step under the hold that began an actor or reported a
    /// call's result (`RegCtx::drive`, the client of today and `ProvesUnpin`)? The older
    /// clients took the lock again for each.
    pub(crate) fn one_hold(&self) -> bool {
        self.cfg.client.breaks_a_rule()
            || matches!(self.cfg.client, Client::Fixed | Client::ProvesUnpin)
    }

    /// Does the client's acquire take `N_PINS` around its persistent pin (and the glue around the
    /// proof's, `Op::ProveUnpinN`, where it makes one)?
    pub(crate) fn models_n_pins_around_p(&self) -> bool {
        matches!(self.cfg.client, Client::TrustsUnpin | Client::ProvesUnpin)
    }

    /// Does the glue take `N_PINS` around `op` (`Op::PinN`, `Op::UnpinN`, `Op::ProveUnpinN`)? The
    /// fixed client (and its variants) nowhere; the client before N lingered asked the state
    /// machine (`Op::takes_n_pins`); the older clients' glue is described by the two above.
    pub(crate) fn glue_takes_n_pins(&self, op: Op) -> bool {
        match (self.cfg.client, op) {
            (c, _) if c == Client::Fixed || c.breaks_a_rule() => false,
            (Client::ProvesUnpin, _) => op.takes_n_pins(),
            (_, Op::ProveUnpinN) => self.models_n_pins_around_p(),
            _ => self.models_n_pins(),
        }
    }

    /// Does the glue make `op` only if, asked again under `N_PINS`, the state machine still says
    /// so (`Registration::still_to_make`)? The fixed client asks `Op::asked_again`, as
    /// src/client.rs does. The older clients: the unpin was asked again wherever `N_PINS` was
    /// taken around it; the proof, which none of them had (the model gives it to the clients of
    /// eb5e4f5 and d115ce6 as the fixed client makes it, and b477f12 answers it Ok without a
    /// call), is asked again by every client.
    pub(crate) fn glue_asks_again(&self, op: Op) -> bool {
        match (self.cfg.client, op) {
            (c, _) if c == Client::Fixed || c == Client::ProvesUnpin || c.breaks_a_rule() => {
                op.asked_again()
            }
            (_, Op::ProveUnpinN) => true,
            (_, Op::UnpinN) => self.models_n_pins(),
            _ => false,
        }
    }

    /// Takes `N_PINS` for `tid` where the client's glue has it (`here`): `None` while another task
    /// holds it.
    pub(crate) fn enter_n_pins(&mut self, tid: Tid, here: bool) -> Option<()> {
        if !here {
            return Some(());
        }
        match self.n_pins {
            None => {
                self.n_pins = Some(tid);
                Some(())
            }
            Some(t) => {
                assert_ne!(t, tid, "N_PINS is not taken twice by a task");
                None
            }
        }
    }

    /// Drops `N_PINS` if `tid` holds it (a no-op where the glue took none).
    pub(crate) fn leave_n_pins(&mut self, tid: Tid) {
        if self.n_pins == Some(tid) {
            self.n_pins = None;
        }
    }

    /// The glue's `Op::PinN` (src/client.rs): `N_PINS` (fixed client), a reference handed to the
    /// driver as the callback's data, get_pages of N, the key stored, `N_PINS` dropped.
    pub(crate) fn glue_pin_n(&mut self, tid: Tid, pc: CallStep) -> Option<()> {
        match pc {
            CallStep::Enter => {
                self.enter_n_pins(tid, self.glue_takes_n_pins(Op::PinN))?;
                self.our_code(true, "get_pages of N");
                self.refs += 1;
                self.set_pc(tid, Frame::Ours(Ours::PinN(CallStep::Returned)));
                self.call_driver(tid, DOp::PinN);
            }
            CallStep::Returned => {
                let r = self.take_ret(tid)?;
                self.our_code(true, "get_pages of N");
                if r.is_ok() {
                    self.n_key = Some(self.n.slot);
                }
                self.leave_n_pins(tid);
                self.ret(tid, r);
            }
        }
        Some(())
    }

    /// The glue's `Op::UnpinN`: the fixed client takes `N_PINS` and, under the registration lock,
    /// makes the call only if N is still Unpinning (the callback marks it TornDown before the
    /// driver frees the table); the client without `N_PINS` reads the key and calls.
    pub(crate) fn glue_unpin_n(&mut self, tid: Tid, pc: CallStep) -> Option<()> {
        match pc {
            CallStep::Enter => {
                self.enter_n_pins(tid, self.glue_takes_n_pins(Op::UnpinN))?;
                self.our_code(true, "put_pages of N");
                let unpinning = self
                    .state
                    .as_ref()
                    .expect("registration")
                    .still_to_make(Op::UnpinN);
                match self.n_key {
                    Some(key) if unpinning || !self.glue_asks_again(Op::UnpinN) => {
                        self.set_pc(tid, Frame::Ours(Ours::UnpinN(CallStep::Returned)));
                        self.call_driver(tid, DOp::UnpinN { key });
                    }
                    _ => {
                        // Torn down meanwhile (or never pinned): no call, and N_PINS dropped on
                        // the way out; the state machine ignores the result once N is torn down.
                        self.leave_n_pins(tid);
                        self.ret(tid, Ok(()));
                    }
                }
            }
            CallStep::Returned => {
                let r = self.take_ret(tid)?;
                self.our_code(true, "put_pages of N");
                self.leave_n_pins(tid);
                self.ret(tid, r);
            }
        }
        Some(())
    }

    /// The glue's `Op::ProveUnpinN` (src/client.rs): the fixed client takes `N_PINS` and, under the
    /// registration lock, makes the proof only if N is still Proving (else a callback has claimed
    /// N and our reference, and the state machine ignores the result: Ok, no driver call); the
    /// proof is a persistent pin of the range's first GPU page (`PersistentPin::get`, one API-lock
    /// step as acquire's) and its unpin at once (`put_pages_persistent`, whatever it answers: the
    /// pin showed the process reaches its memory); `N_PINS` dropped; the pin's answer reported.
    /// The clients of eb5e4f5 and d115ce6 make it the same way without `N_PINS`.
    pub(crate) fn glue_prove_unpin_n(&mut self, tid: Tid, pc: ProofStep) -> Option<()> {
        match pc {
            ProofStep::Enter => {
                self.enter_n_pins(tid, self.glue_takes_n_pins(Op::ProveUnpinN))?;
                self.our_code(true, "the proof of the unpin of N");
                let proving = self
                    .state
                    .as_ref()
                    .expect("registration")
                    .still_to_make(Op::ProveUnpinN);
                if proving || !self.glue_asks_again(Op::ProveUnpinN) {
                    self.set_pc(tid, Frame::Ours(Ours::ProveUnpinN(ProofStep::Pinned)));
                    self.call_driver(tid, DOp::ProbePin);
                } else {
                    self.leave_n_pins(tid);
                    self.ret(tid, Ok(()));
                }
            }
            ProofStep::Pinned => match self.take_ret(tid)? {
                Err(e) => {
                    self.our_code(true, "the proof of the unpin of N");
                    self.leave_n_pins(tid);
                    self.ret(tid, Err(e));
                }
                Ok(()) => {
                    self.our_code(true, "the proof of the unpin of N");
                    self.set_pc(tid, Frame::Ours(Ours::ProveUnpinN(ProofStep::Unpinned)));
                    self.call_driver(tid, DOp::ProbeUnpin);
                }
            },
            ProofStep::Unpinned => {
                self.returned(tid)?;
                self.our_code(true, "the proof of the unpin of N");
                self.leave_n_pins(tid);
                self.ret(tid, Ok(()));
            }
        }
        Some(())
    }

    /// The second registration (owner process, second allocation): its acquire's persistent pin
    /// (`N_PINS` around it for the fixed client only), then its N as the glue's `Op::PinN` makes
    /// it (`N_PINS` for the fixed client and the client of d115ce6, get_pages, `N_PINS` dropped).
    /// Its registration state, host and callback are left out: its allocation is never freed in
    /// the model, and it keeps both pins to the end.
    pub(crate) fn second_pin(&mut self, tid: Tid, pc: SecondPinStep) -> Option<()> {
        match pc {
            SecondPinStep::PinP => {
                self.enter_n_pins(tid, self.models_n_pins_around_p())?;
                self.our_code(false, "");
                self.set_pc(tid, Frame::SecondPin(SecondPinStep::PinnedP));
                self.call_driver(tid, DOp::PinP2);
            }
            SecondPinStep::PinnedP => {
                self.returned(tid)?;
                self.our_code(false, "");
                self.leave_n_pins(tid);
                self.set_pc(tid, Frame::SecondPin(SecondPinStep::PinN));
            }
            SecondPinStep::PinN => {
                self.enter_n_pins(tid, self.glue_takes_n_pins(Op::PinN))?;
                self.our_code(false, "");
                self.set_pc(tid, Frame::SecondPin(SecondPinStep::PinnedN));
                self.call_driver(tid, DOp::PinN2);
            }
            SecondPinStep::PinnedN => {
                self.returned(tid)?;
                self.our_code(false, "");
                self.leave_n_pins(tid);
                self.ret(tid, Ok(()));
            }
        }
        Some(())
    }
}
