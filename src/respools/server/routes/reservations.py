"""``/v1/reservations``: guaranteed extra capacity for a subject in a window."""

from __future__ import annotations

from fastapi import APIRouter, status

from respools.model import Reservation, ReservationSpec
from respools.server.auth import require_owner, visible_subject
from respools.server.errors import forbidden
from respools.server.ops import reservations
from respools.server.routes.deps import ERRORS, AdminAuth, Auth, NameFilter, ServicesDep

router = APIRouter(prefix="/v1/reservations", tags=["reservations"], responses=ERRORS)


@router.get("", response_model=list[Reservation], summary="List reservations (current and future by default)")
def list_reservations(
    services: ServicesDep,
    principal: Auth,
    pool: NameFilter = None,
    subject: NameFilter = None,
    include_past: bool = False,
) -> list[Reservation]:
    own = visible_subject(principal)
    if own is not None and subject is not None and subject != own:
        raise forbidden(f"your token is for subject {own!r}; it cannot list {subject!r}'s reservations")
    return reservations.list_reservations(services.db, pool=pool, subject=own or subject, include_past=include_past)


@router.post("", response_model=Reservation, status_code=status.HTTP_201_CREATED, summary="Create a reservation")
def create_reservation(spec: ReservationSpec, services: ServicesDep, _: AdminAuth) -> Reservation:
    return reservations.create_reservation(services.db, spec)


@router.get("/{reservation_id}", response_model=Reservation, summary="Get a reservation")
def get_reservation(reservation_id: str, services: ServicesDep, principal: Auth) -> Reservation:
    reservation = reservations.get_reservation(services.db, reservation_id)
    require_owner(principal, reservation.subject, f"reservation {reservation_id}")
    return reservation


@router.delete("/{reservation_id}", status_code=status.HTTP_204_NO_CONTENT, summary="Delete a reservation")
def delete_reservation(reservation_id: str, services: ServicesDep, _: AdminAuth) -> None:
    reservations.delete_reservation(services.db, reservation_id)
