"""The averaging schemes on a model's parameters, with the shape they have in C++.

    scheme = chorus.averaging.DPSGD(comm, model.parameters(), topology=chorus.Topology.ring(comm.size))
    for x, y in batches:
        scheme.begin_step()          # before the gradient: starts what overlaps it
        loss_fn(model(x), y).backward()
        scheme.reduce_gradients()    # allreduce-SGD averages the gradients; the others pass
        optimiser.step()
        scheme.end_step()            # the scheme's model step (mix, pull, push)
    scheme.finish()                  # collective: the parameters become the model to keep

or wrap the optimiser and keep the usual loop (``zero_grad`` begins the
step, ``step`` ends it)::

    optimiser = chorus.averaging.Averaged(torch.optim.SGD(model.parameters(), lr=0.1), scheme)

Parameters are float32 arrays (torch tensors on the CPU or a GPU, NumPy or
CuPy arrays), read and written where they are: keep the model where it was
when the scheme was made (no ``.to()`` afterwards). ``comm`` is a
chorus.Communicator (CUDA parameters then move staged or direct, as in C++)
or a ``chorus.nccl.connect`` communicator: allreduce-SGD, local SGD, EASGD
and D-PSGD then run on NCCL (D-PSGD mixing on the device, each round one
NCCL group), and the others on the chorus communicator it was made from.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional

from . import _chorus
from .communicator import Communicator, CodecLike
from .errors import InvalidArgument


def _arrays(params: Iterable[Any]) -> List[Any]:
    """The arrays behind `params`: a torch parameter's storage (detached, shared), else the array itself."""
    arrays = [p.detach() if hasattr(p, "detach") else p for p in params]
    if not arrays:
        raise InvalidArgument("the scheme was given no parameters")
    return arrays


class Scheme:
    """What every scheme has: begin_step, reduce_gradients, end_step, finish, stats."""

    def __init__(self, impl: Any, params: List[Any]) -> None:
        self._impl = impl
        self.params = params  # the arrays the scheme reads and writes

    def begin_step(self) -> None:
        self._impl.begin_step()

    def reduce_gradients(self) -> None:
        self._impl.reduce_gradients()

    def end_step(self) -> None:
        self._impl.end_step()

    def finish(self) -> None:
        """Collective: the parameters become the model to keep."""
        self._impl.finish()

    def leave(self) -> None:
        """Leaves the job on purpose, between steps, instead of finish(): this worker's share goes to the
        others (GoSGD: its weight; a parameter-server worker: its pending pushes; asynchronous EASGD: a
        last pull; DiLoCo: its last round, each fragment synced once more) and they finish() without it. The scheme is closed here afterwards."""
        if not hasattr(self._impl, "leave"):
            raise InvalidArgument(f"{type(self).__name__} is synchronous: a worker cannot leave it "
                                  "(GoSGD, EASGDAsync, ParameterServer and DiLoCo workers can)")
        self._impl.leave()

    def step(self, compute_gradients: Callable[[], Any], apply_update: Callable[[], Any]) -> None:
        """One whole step: begin, gradients, reduce, update, end."""
        self.begin_step()
        compute_gradients()
        self.reduce_gradients()
        apply_update()
        self.end_step()

    @property
    def stats(self) -> dict:
        """steps, exchanges, merges, bytes_sent, messages_sent of this rank."""
        return self._impl.stats

    def close(self) -> None:
        """Stops the scheme's threads without finishing (after an error)."""
        self._impl.close()


class AllreduceSGD(Scheme):
    """Averages the gradients every step (synchronous data parallelism).

    grads: the gradient arrays; for torch parameters leave it None: the
    scheme keeps one gradient tensor per parameter and makes it ``p.grad``
    (copying a fresh ``p.grad`` into it when zero_grad set it to None)."""

    def __init__(self, comm: Communicator, params: Iterable[Any], grads: Optional[Iterable[Any]] = None, *,
                 codec: CodecLike = None, bucket_bytes: int = 0) -> None:
        torch_params = list(params)
        arrays = _arrays(torch_params)
        self._owners = None
        if grads is None:
            if not all(hasattr(p, "grad") for p in torch_params):
                raise InvalidArgument("AllreduceSGD: pass grads= for arrays that are not torch parameters")
            import torch

            self._owners = torch_params
            grads = [torch.zeros_like(a) for a in arrays]
        self.grads = list(grads)
        super().__init__(_chorus.AllreduceSGD(comm._impl, arrays, self.grads, codec, bucket_bytes), arrays)

    def reduce_gradients(self) -> None:
        if self._owners is not None:
            for owner, kept in zip(self._owners, self.grads):
                if owner.grad is None:
                    kept.zero_()  # no gradient this step: it contributes zero
                elif owner.grad.data_ptr() != kept.data_ptr():
                    kept.copy_(owner.grad)
                owner.grad = kept
        super().reduce_gradients()


class LocalSGD(Scheme):
    """Averages the models every `period` steps (every step for the first `warmup_steps`)."""

    def __init__(self, comm: Communicator, params: Iterable[Any], *, period: int = 8, warmup_steps: int = 0,
                 codec: CodecLike = None, bucket_bytes: int = 0) -> None:
        arrays = _arrays(params)
        super().__init__(_chorus.LocalSGD(comm._impl, arrays, period, warmup_steps, codec, bucket_bytes), arrays)


class DiLoCo(Scheme):
    """DiLoCo: `period` inner steps with the trainer's own optimizer (`inner_optimizer`, AdamW in the
    paper), then the outer gradient (the global model minus the workers' mean model) averaged and an
    outer SGD step on the global model (Nesterov, `outer_lr` 0.7, `outer_momentum` 0.9), which every
    worker continues from. Every rank starts from rank 0's parameters.

    Streaming DiLoCo: `fragments` > 1 splits the tensors (tensor t in fragment t % fragments), fragment
    f synced at the steps where step % period == f * period // fragments; its allreduce overlaps
    `overlap_steps` inner steps, and the new global fragment merges as mixing * local + (1 - mixing) *
    global. `codec` sends the outer gradients compressed, with error feedback ("fp4_e2m1", "fp8_e4m3",
    "int8", ...); without one the models are averaged in float32.

    Rounds end every `period` steps, or after `round_seconds` of this worker's compute, or when the job
    has processed about `round_samples` samples (from its measured rate): a fast worker then takes more
    steps than a slow one instead of waiting. Each worker's model counts by the samples it processed
    in the round (`samples` of inner_step / end_step, 1 a step unless given); `job_samples` is the job's
    count so far, the same on every rank, for a learning-rate schedule by the job's progress.

    Workers come and go: with `on_peer_failure="continue"` the others go on without a worker that dies
    (the syncs it was in run again without it; `lost_peers()` lists it); `leave()` ends this worker's
    round first and keeps the global model; a process started with `chorus.join()` (or `chorus-run
    --join`) enters at a sync with the global model and the outer momentum its peers hold.

        scheme = chorus.averaging.DiLoCo(comm, model.parameters(), torch.optim.AdamW(model.parameters()),
                                         period=100, codec="fp4_e2m1")
        for x, y in batches:
            scheme.zero_grad()
            loss_fn(model(x), y).backward()
            scheme.inner_step()      # the inner optimizer's step, then the scheme's
        scheme.finish()              # every rank holds the global model
    """

    def __init__(self, comm: Communicator, params: Iterable[Any], inner_optimizer: Any = None, *,
                 period: int = 500, round_seconds: float = 0.0, round_samples: int = 0, outer_lr: float = 0.7,
                 outer_momentum: float = 0.9, nesterov: bool = True, codec: CodecLike = None, fragments: int = 1,
                 overlap_steps: int = 0, mixing: float = 0.0, on_peer_failure: str = "raise") -> None:
        arrays = _arrays(params)
        self.inner_optimizer = inner_optimizer
        super().__init__(_chorus.DiLoCo(comm._impl, arrays, period, round_seconds, round_samples, outer_lr,
                                        outer_momentum, nesterov, codec, fragments, overlap_steps, mixing,
                                        on_peer_failure), arrays)

    def lost_peers(self) -> List[dict]:
        """The workers this one went on without (on_peer_failure="continue"): rank, step, seconds."""
        return self._impl.lost_peers()

    @property
    def syncs(self) -> int:
        """The syncs this worker completed (the same count on every survivor)."""
        return self._impl.syncs

    def end_step(self, samples: int = 1) -> None:
        """After an inner step that processed `samples` samples (its weight in the round's average)."""
        self._impl.end_step(samples)

    @property
    def job_samples(self) -> int:
        """The samples the whole job processed up to the last completed sync (the same on every rank)."""
        return self._impl.job_samples

    @property
    def round_seconds(self) -> float:
        """T: compute seconds between a fragment's syncs (0 while rounds are counted in steps)."""
        return self._impl.round_seconds

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._inner("zero_grad").zero_grad(set_to_none=set_to_none)

    def inner_step(self, closure: Optional[Callable[[], Any]] = None, samples: int = 1) -> Any:
        """The inner optimizer's step, then end_step(samples) (a sync where this step ends a fragment's round)."""
        result = self._inner("inner_step").step(closure)
        self.end_step(samples)
        return result

    def global_model(self, fragment: int = 0) -> Any:
        """Fragment `fragment`'s part of the last global model, a float32 NumPy copy (tensors in order)."""
        return self._impl.global_model(fragment)

    def _inner(self, call: str) -> Any:
        if self.inner_optimizer is None:
            raise InvalidArgument(f"DiLoCo.{call}() needs the inner optimizer: pass it as the third argument, "
                                  "or step your own optimizer and call end_step()")
        return self.inner_optimizer


class JobProgress:
    """The job's samples for the schemes that have no collective to count them (GoSGD, the one-sided
    gossip, asynchronous EASGD), so a learning-rate schedule and the epochs follow the job's progress, not
    this rank's: every rank adds its samples to one counter in the job's store at most every `interval`
    seconds, and `samples` is the total as of its last flush plus what it processed since (DiLoCo counts
    the job's samples itself: DiLoCo.job_samples). Without a store: this rank's samples times the ranks."""

    def __init__(self, comm: Communicator, name: str = "train", interval: float = 0.5) -> None:
        self._impl = _chorus.JobProgress(comm._impl, name, interval)

    def add(self, samples: int) -> None:
        self._impl.add(samples)

    def flush(self) -> None:
        self._impl.flush()

    @property
    def samples(self) -> int:
        return self._impl.samples

    @property
    def own(self) -> int:
        return self._impl.own


class DPSGD(Scheme):
    """Decentralised SGD: mixes with the neighbours of `topology` (default: a ring) every step; with
    `one_sided` its rounds go through a tensor window (puts into the neighbours' slots), bit for bit the same."""

    def __init__(self, comm: Communicator, params: Iterable[Any], *, topology: Optional[_chorus.Topology] = None,
                 codec: CodecLike = None, one_sided: bool = False) -> None:
        arrays = _arrays(params)
        super().__init__(_chorus.DPSGD(comm._impl, arrays, topology, codec, one_sided), arrays)


class DPSGDWindow(DPSGD):
    """D-PSGD whose rounds go through a tensor window (``DPSGD(..., one_sided=True)``)."""

    def __init__(self, comm: Communicator, params: Iterable[Any], *, topology: Optional[_chorus.Topology] = None,
                 codec: CodecLike = None) -> None:
        super().__init__(comm, params, topology=topology, codec=codec, one_sided=True)


class OneSidedGossip(Scheme):
    """Push-sum gossip over a tensor window: after each step a rank merges what landed in its slots and
    accumulates its weighted model into its out-neighbours' (a column-stochastic `topology`, default the
    one-peer exponential graph), never waiting for them. finish(): the consensus sum(p x) / sum(p)."""

    def __init__(self, comm: Communicator, params: Iterable[Any], *, topology: Optional[_chorus.Topology] = None,
                 codec: CodecLike = None, on_peer_failure: str = "raise") -> None:
        arrays = _arrays(params)
        super().__init__(_chorus.OneSidedGossip(comm._impl, arrays, topology, codec, on_peer_failure), arrays)

    def lost_peers(self) -> List[dict]:
        """The neighbours this rank went on without (on_peer_failure="continue"): rank, step, seconds."""
        return self._impl.lost_peers()

    def quiesce(self) -> None:
        """Collective: every push made before any rank's quiesce() is merged; the weights sum to the ranks."""
        self._impl.quiesce()

    @property
    def weight(self) -> float:
        """This rank's push-sum weight p."""
        return self._impl.weight


class EASGD(Scheme):
    """Synchronous elastic averaging: every `tau` steps each model and the centre pull together by `alpha`."""

    def __init__(self, comm: Communicator, params: Iterable[Any], *, alpha: float = 0.05, tau: int = 1,
                 codec: CodecLike = None) -> None:
        arrays = _arrays(params)
        super().__init__(_chorus.EASGD(comm._impl, arrays, alpha, tau, codec), arrays)

    def centre(self) -> Any:
        """A NumPy copy of the centre."""
        return self._impl.centre()


class EASGDAsync(Scheme):
    """Asynchronous elastic averaging: every `tau` steps a worker pulls with the server rank's centre."""

    def __init__(self, comm: Communicator, params: Iterable[Any], *, alpha: float = 0.05, tau: int = 4,
                 server: int = 0, on_peer_failure: str = "raise") -> None:
        arrays = _arrays(params)
        super().__init__(_chorus.EASGDAsync(comm._impl, arrays, alpha, tau, server, on_peer_failure), arrays)

    def lost_peers(self) -> List[dict]:
        """The workers the server went on without (on_peer_failure="continue"): rank, step, seconds."""
        return self._impl.lost_peers()

    def centre(self) -> Any:
        """A NumPy copy of the centre (the server's; empty on workers)."""
        return self._impl.centre()


class GoSGD(Scheme):
    """Gossip SGD: after each step, with probability `push_probability`, push half the model to a random peer."""

    def __init__(self, comm: Communicator, params: Iterable[Any], *, push_probability: float = 0.5, seed: int = 1,
                 codec: CodecLike = None, on_peer_failure: str = "raise") -> None:
        arrays = _arrays(params)
        super().__init__(_chorus.GoSGD(comm._impl, arrays, push_probability, seed, codec, on_peer_failure), arrays)

    def lost_peers(self) -> List[dict]:
        """The peers this rank went on without (on_peer_failure="continue"): rank, step, seconds."""
        return self._impl.lost_peers()

    def quiesce(self) -> None:
        """Collective: a consistent cut (every push sent before any rank's
        quiesce() merged, none after); snapshot the consensus here."""
        self._impl.quiesce()

    @property
    def weight(self) -> float:
        """This rank's share: sum(weight * model) over the ranks is the consensus."""
        return self._impl.weight


class TreeEASGD(Scheme):
    """Elastic averaging on a tree of fan-out `fanout`: pull toward the parent every `tau_up` steps, push toward
    the children every `tau_down`; finish() keeps the root's model."""

    def __init__(self, comm: Communicator, params: Iterable[Any], *, alpha: float = 0.05, tau_up: int = 4,
                 tau_down: int = 4, fanout: int = 2) -> None:
        arrays = _arrays(params)
        super().__init__(_chorus.TreeEASGD(comm._impl, arrays, alpha, tau_up, tau_down, fanout), arrays)


class ParameterServer(Scheme):
    """A parameter server: shards on every rank (or on `dedicated_servers` ranks that only serve), SGD with
    momentum on the servers, consistency `mode` "bsp", "ssp" (bound `staleness`) or "downpour" (push every
    `push_every` steps, fetch every `fetch_every`; with `fetch_by_get` a fetch is a one-sided window get of the
    shards each server publishes, asking no server; with `push_by_accumulate` a push is a window accumulate into
    each server's slot for this worker). Each pull replaces the model by the servers'."""

    def __init__(self, comm: Communicator, params: Iterable[Any], grads: Iterable[Any], *,
                 mode: str = "bsp", staleness: int = 3, push_every: int = 1, fetch_every: int = 1,
                 dedicated_servers: int = 0, learning_rate: float = 0.05, momentum: float = 0.9,
                 nesterov: bool = False, on_peer_failure: str = "raise", fetch_by_get: bool = False,
                 push_by_accumulate: bool = False) -> None:
        arrays = _arrays(params)
        self.grads = _arrays(grads)  # read at every reduce_gradients(): keep them where they are
        super().__init__(_chorus.ParameterServer(comm._impl, arrays, self.grads, mode, staleness, push_every,
                                                 fetch_every, dedicated_servers, learning_rate, momentum, nesterov,
                                                 on_peer_failure, fetch_by_get, push_by_accumulate), arrays)

    @property
    def is_worker(self) -> bool:
        return self._impl.is_worker

    def set_learning_rate(self, rate: float) -> None:
        """Scales this worker's pushes by rate / the servers' learning rate (a schedule without a message)."""
        self._impl.set_learning_rate(rate)

    def server_stats(self) -> dict:
        """What this rank's shard saw: gradients_applied, staleness_mean, staleness_max, clock_gap_max, pulls_served."""
        return self._impl.server_stats()

    def lost_peers(self) -> List[dict]:
        return self._impl.lost_peers()


SCHEMES = {
    "allreduce": AllreduceSGD,
    "local": LocalSGD,
    "dpsgd": DPSGD,
    "dpsgd-window": DPSGDWindow,
    "easgd-sync": EASGD,
    "easgd": EASGDAsync,
    "gosgd": GoSGD,
    "one-sided-gossip": OneSidedGossip,
    "tree-easgd": TreeEASGD,
    "diloco": DiLoCo,
    "streaming-diloco": DiLoCo,
}


class Averaged:
    """A torch optimiser with a scheme around its step: ``zero_grad()`` begins
    the scheme's step, ``step()`` reduces the gradients, updates and ends it.
    Everything else is the optimiser's."""

    def __init__(self, optimizer: Any, scheme: Scheme) -> None:
        self.optimizer = optimizer
        self.scheme = scheme
        self._begun = False

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._begin()
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Optional[Callable[[], Any]] = None, samples: Optional[int] = None) -> Any:
        """`samples`: what the step processed, for a scheme that weighs by it (DiLoCo)."""
        self._begin()  # a loop without zero_grad: begun late, still correct
        self.scheme.reduce_gradients()
        loss = self.optimizer.step(closure)
        if samples is None:
            self.scheme.end_step()
        else:
            self.scheme.end_step(samples)
        self._begun = False
        return loss

    def finish(self) -> None:
        """Collective: the parameters become the model to keep."""
        self.scheme.finish()

    def leave(self) -> None:
        """This worker leaves the job on purpose (Scheme.leave)."""
        self.scheme.leave()

    def _begin(self) -> None:
        if not self._begun:
            self.scheme.begin_step()
            self._begun = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)
