# -*- shell-script -*-
#
# mtl_rustofi inside an Open MPI 5.0.x source tree (installed there by
# ompi-patch/add-to-tree). Builds when cargo and libfabric are found.

AC_DEFUN([MCA_ompi_mtl_rustofi_POST_CONFIG], [
    AS_IF([test "$1" = "1"], [OMPI_REQUIRE_ENDPOINT_TAG([MTL])])
])dnl

AC_DEFUN([MCA_ompi_mtl_rustofi_CONFIG],[
    OPAL_VAR_SCOPE_PUSH([mtl_rustofi_happy])
    AC_CONFIG_FILES([ompi/mca/mtl/rustofi/Makefile])

    mtl_rustofi_happy=1
    AC_ARG_VAR([CARGO], [Rust's cargo, which builds the rustofi MTL's library])
    AC_PATH_PROG([CARGO], [cargo], [], [$PATH$PATH_SEPARATOR$HOME/.cargo/bin])
    AS_IF([test -z "$CARGO"],
          [AC_MSG_WARN([cargo not found: the rustofi MTL is not built])
           mtl_rustofi_happy=0])

    AS_IF([test $mtl_rustofi_happy -eq 1],
          [OPAL_CHECK_OFI([mtl_rustofi], [], [mtl_rustofi_happy=0])])

    AS_IF([test $mtl_rustofi_happy -eq 1], [$1], [$2])

    AC_SUBST([mtl_rustofi_CPPFLAGS])
    AC_SUBST([mtl_rustofi_LDFLAGS])
    AC_SUBST([mtl_rustofi_LIBS])
    OPAL_VAR_SCOPE_POP
])dnl
