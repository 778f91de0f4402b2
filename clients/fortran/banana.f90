! banana.f90: sample a 2-d banana with Kameleon from Fortran, with several worker processes.
!
! The log density is Fortran; the HTTP is the C client (../c/kameleon_client.c), called
! through ISO_C_BINDING. Build and run (Debian: apt-get install gfortran gcc make
! libcurl4-openssl-dev libcjson-dev):
!
!     make          # or: gcc -O2 -c ../c/kameleon_client.c && gfortran -O2 -o banana banana.f90 kameleon_client.o -lcurl -lcjson
!     KAMELEON_URL=http://127.0.0.1:8000 ./banana
!
! Settings (environment), as for the C client:
!     KAMELEON_URL            the service (default http://127.0.0.1:8000)
!     KAMELEON_API_KEY        sent as X-API-Key when set
!     KAMELEON_SESSION        work on this existing session instead of creating one
!     KAMELEON_ALGORITHM      am (default), rwm, kameleon, kmc-lite, kmc-finite; or one
!                             that uses gradients, mala, hmc, nuts: each result then
!                             carries the banana's gradient (log_density_gradient). A
!                             worker that joins such a session names its algorithm too.
!     KAMELEON_OPTIONS        algorithm options as a JSON object (default: none)
!     KAMELEON_CHAINS         chains (default 4)
!     KAMELEON_ITERATIONS     draws kept per chain after warm-up (default 2000)
!     KAMELEON_WARMUP         warm-up iterations per chain (default 1000)
!     KAMELEON_SEED           seed (default 1)
!     KAMELEON_WORKERS        worker processes (default 2)
!     KAMELEON_MAX            proposals per request and worker (default chains / workers)
!     KAMELEON_LEASE_SECONDS  how long a worker holds its proposals (default: the service's)
!
! The target is the banana B(b, v): x ~ N(0, diag(v, 1)) twisted by y2 = x2 + b (x1^2 - v),
! cut off (log density -inf) outside the band |y2 - b (y1^2 - v)| <= band around its ridge.
! Its mean is 0 and Var y1 = v. Replace log_density (and log_density_gradient, for mala,
! hmc, nuts) with your own.

! The C client's functions, as Fortran sees them (kameleon_client.h).
module kameleon_client
  use, intrinsic :: iso_c_binding, only: c_char, c_double, c_funptr, c_int, c_long, c_ptr, c_size_t
  implicit none
  interface
    function kc_open(url, api_key) bind(C, name="kc_open")
      import :: c_char, c_ptr
      character(kind=c_char), intent(in) :: url(*), api_key(*)
      type(c_ptr) :: kc_open
    end function kc_open

    subroutine kc_close(kc) bind(C, name="kc_close")
      import :: c_ptr
      type(c_ptr), value :: kc
    end subroutine kc_close

    function kc_create_session(kc, algorithm, dim, chains, warmup, max_iterations, seed, &
                               initial, options_json, id, id_size) bind(C, name="kc_create_session")
      import :: c_char, c_double, c_int, c_long, c_ptr, c_size_t
      type(c_ptr), value :: kc
      character(kind=c_char), intent(in) :: algorithm(*), options_json(*)
      integer(c_int), value :: dim, chains, warmup, max_iterations
      integer(c_long), value :: seed
      real(c_double), intent(in) :: initial(*)
      character(kind=c_char), intent(out) :: id(*)
      integer(c_size_t), value :: id_size
      integer(c_int) :: kc_create_session
    end function kc_create_session

    function kc_run_workers(url, api_key, id, workers, max, lease_seconds, f, data) &
        bind(C, name="kc_run_workers")
      import :: c_char, c_double, c_funptr, c_int, c_ptr
      character(kind=c_char), intent(in) :: url(*), api_key(*), id(*)
      integer(c_int), value :: workers, max
      real(c_double), value :: lease_seconds
      type(c_funptr), value :: f
      type(c_ptr), value :: data
      integer(c_int) :: kc_run_workers
    end function kc_run_workers

    function kc_run_workers_gradient(url, api_key, id, workers, max, lease_seconds, f, data) &
        bind(C, name="kc_run_workers_gradient")
      import :: c_char, c_double, c_funptr, c_int, c_ptr
      character(kind=c_char), intent(in) :: url(*), api_key(*), id(*)
      integer(c_int), value :: workers, max
      real(c_double), value :: lease_seconds
      type(c_funptr), value :: f
      type(c_ptr), value :: data
      integer(c_int) :: kc_run_workers_gradient
    end function kc_run_workers_gradient

    function kc_needs_gradient(algorithm) bind(C, name="kc_needs_gradient")
      import :: c_char, c_int
      character(kind=c_char), intent(in) :: algorithm(*)
      integer(c_int) :: kc_needs_gradient
    end function kc_needs_gradient

    function kc_print_diagnostics(kc, id) bind(C, name="kc_print_diagnostics")
      import :: c_char, c_int, c_ptr
      type(c_ptr), value :: kc
      character(kind=c_char), intent(in) :: id(*)
      integer(c_int) :: kc_print_diagnostics
    end function kc_print_diagnostics
  end interface
end module kameleon_client

! The target: your model goes here.
module banana_target
  use, intrinsic :: iso_c_binding, only: c_double, c_int, c_ptr
  use, intrinsic :: ieee_arithmetic, only: ieee_negative_inf, ieee_value
  implicit none
  real(c_double), parameter :: b = 0.03_c_double    ! twist
  real(c_double), parameter :: v = 25.0_c_double    ! variance of y1
  real(c_double), parameter :: band = 4.0_c_double  ! half-width of the support around the ridge
contains
  ! The (unnormalised) log density at y(1:dim); -inf outside the support.
  function log_density(y, dim, data) result(value) bind(C)
    integer(c_int), value :: dim
    real(c_double), intent(in) :: y(dim)
    type(c_ptr), value :: data   ! unused: pass your model's state through it
    real(c_double) :: value
    real(c_double) :: u

    u = y(2) - b * (y(1)**2 - v)  ! the untwisted second coordinate
    if (abs(u) > band) then
      value = ieee_value(value, ieee_negative_inf)
    else
      value = -0.5_c_double * (y(1)**2 / v + u**2)
    end if
  end function log_density

  ! The same log density, and its gradient in gradient(1:dim), for the algorithms that
  ! use gradients (mala, hmc, nuts). The service checks the gradient against finite
  ! differences at the first chain's initial point and stops the session when it is wrong.
  function log_density_gradient(y, dim, gradient, data) result(value) bind(C)
    integer(c_int), value :: dim
    real(c_double), intent(in) :: y(dim)
    real(c_double), intent(out) :: gradient(dim)
    type(c_ptr), value :: data
    real(c_double) :: value
    real(c_double) :: u

    u = y(2) - b * (y(1)**2 - v)
    value = log_density(y, dim, data)
    gradient(1) = -y(1) / v + 2 * b * y(1) * u  ! d/dy1 of -(y1^2/v + u^2)/2
    gradient(2) = -u                            ! d/dy2
  end function log_density_gradient
end module banana_target

program banana
  use, intrinsic :: iso_c_binding, only: c_char, c_double, c_funloc, c_int, c_long, &
                                         c_null_char, c_null_ptr, c_ptr, c_size_t
  use kameleon_client
  use banana_target
  implicit none
  integer, parameter :: dim = 2
  character(:), allocatable :: url, api_key, session, algorithm
  character(kind=c_char, len=128) :: id
  type(c_ptr) :: kc
  integer :: chains, iterations, warmup, workers, max, c, rc
  integer(c_long) :: seed
  real(c_double) :: lease, y1
  real(c_double), allocatable :: initial(:, :)

  url = env("KAMELEON_URL", "http://127.0.0.1:8000")
  api_key = env("KAMELEON_API_KEY", "")
  session = env("KAMELEON_SESSION", "")
  algorithm = env("KAMELEON_ALGORITHM", "am")
  chains = env_int("KAMELEON_CHAINS", 4)
  iterations = env_int("KAMELEON_ITERATIONS", 2000)  ! kept after warm-up
  warmup = env_int("KAMELEON_WARMUP", 1000)
  workers = env_int("KAMELEON_WORKERS", 2)
  max = env_int("KAMELEON_MAX", (chains + workers - 1) / workers)
  seed = env_int("KAMELEON_SEED", 1)
  lease = env_real("KAMELEON_LEASE_SECONDS", 0.0_c_double)

  kc = kc_open(url // c_null_char, api_key // c_null_char)
  if (len(session) > 0) then
    id = session // c_null_char
  else
    ! Start the chains on the ridge, spread over +-1.5 sd of y1; one column per chain.
    allocate (initial(dim, chains))
    do c = 1, chains
      y1 = 0
      if (chains > 1) y1 = 1.5_c_double * sqrt(v) * (2.0_c_double * (c - 1) / (chains - 1) - 1)
      initial(:, c) = [y1, b * (y1**2 - v)]
    end do
    if (kc_create_session(kc, algorithm // c_null_char, dim, chains, &
                          warmup, warmup + iterations, seed, initial, &
                          env("KAMELEON_OPTIONS", "") // c_null_char, id, &
                          int(len(id), c_size_t)) /= 0) error stop 1
  end if
  print '(a, a)', "session ", id(1:index(id, c_null_char) - 1)
  flush (6)  ! the workers are forked: print before they copy the buffer

  if (kc_needs_gradient(algorithm // c_null_char) /= 0) then
    rc = kc_run_workers_gradient(url // c_null_char, api_key // c_null_char, id, workers, max, &
                                 lease, c_funloc(log_density_gradient), c_null_ptr)
  else
    rc = kc_run_workers(url // c_null_char, api_key // c_null_char, id, workers, max, lease, &
                        c_funloc(log_density), c_null_ptr)
  end if
  if (rc /= 0) error stop 1
  if (kc_print_diagnostics(kc, id) /= 0) error stop 1
  call kc_close(kc)

contains

  ! An environment variable, or `default` when it is unset or empty.
  function env(name, default) result(value)
    character(*), intent(in) :: name, default
    character(:), allocatable :: value
    integer :: n, status
    call get_environment_variable(name, length=n, status=status)
    if (status /= 0 .or. n == 0) then
      value = default
    else
      allocate (character(n) :: value)
      call get_environment_variable(name, value)
    end if
  end function env

  integer function env_int(name, default)
    character(*), intent(in) :: name
    integer, intent(in) :: default
    character(:), allocatable :: text
    text = env(name, "")
    env_int = default
    if (len(text) > 0) read (text, *) env_int
  end function env_int

  real(c_double) function env_real(name, default)
    character(*), intent(in) :: name
    real(c_double), intent(in) :: default
    character(:), allocatable :: text
    text = env(name, "")
    env_real = default
    if (len(text) > 0) read (text, *) env_real
  end function env_real
end program banana
