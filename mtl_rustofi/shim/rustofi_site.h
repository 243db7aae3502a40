/*
 * mtl_rustofi: what makes the component at home in an Open MPI
 * installation (rustofi_site.c): enumerated MCA parameters, help messages
 * through opal_show_help, library output through opal_output, and MPI_T
 * performance variables.
 */
#ifndef RUSTOFI_SITE_H
#define RUSTOFI_SITE_H

#include "opal/mca/mca.h"

/* The enumerated string parameters, in the order of the table in
 * rustofi_site.c. */
typedef enum {
    RUSTOFI_ENUM_RNDV_PROTOCOL,
    RUSTOFI_ENUM_SHM,
    RUSTOFI_ENUM_FAULT_INJECT,
    RUSTOFI_ENUM_TAGGED,
    RUSTOFI_ENUM_COUNT
} rustofi_enum_id_t;

/* Routes the library's messages through Open MPI and finds the help file;
 * called first thing when the component registers. */
void rustofi_site_hooks(const mca_base_component_t *component);

/* Registers the enumerated parameters and the performance variables. */
int rustofi_site_register(const mca_base_component_t *component);

/* The value of an enumerated parameter as its string, for the Rust
 * library's validation. A setting Open MPI refused (not one of the listed
 * values) comes back as the user's text, so that the library rejects it
 * with its own message. */
const char *rustofi_enum_text(rustofi_enum_id_t which);

#endif
