/*
 * mtl_rustofi: enumerated MCA parameters, help messages, output and MPI_T
 * performance variables (see rustofi_site.h). Table-driven: a new
 * enumerated parameter is one row of enum_params (plus its values), a new
 * performance variable one line of the Rust table in src/pvars.rs.
 */

#include "ompi_config.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi.h"
#include "ompi/proc/proc.h"
#include "opal/mca/base/mca_base_pvar.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/base/mca_base_var_enum.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"

#include "rustofi.h"
#include "rustofi_site.h"

#define RUSTOFI_HELP_FILE "help-mtl-rustofi.txt"

/* ---- enumerated parameters -------------------------------------------- */

static const mca_base_var_enum_value_t rndv_protocol_values[] = {
    {0, "auto"}, {1, "read"}, {2, "send"}, {3, "msg"}, {0, NULL}};
static const mca_base_var_enum_value_t tagged_values[] = {{0, "auto"}, {1, "off"}, {0, NULL}};
/* Numbered so that the numeric forms Open MPI also accepts keep their
 * boolean meaning (0 off, 1 on). */
static const mca_base_var_enum_value_t shm_values[] = {
    {2, "auto"}, {1, "on"}, {0, "off"}, {3, "libfabric"}, {0, NULL}};
static const mca_base_var_enum_value_t fault_inject_values[] = {
    {0, "none"}, {1, "rma_key"}, {2, "bad_packet"}, {3, "lose_data"},
    {4, "lose_whole"}, {5, "late_comm"}, {6, "excid_lost"}, {0, NULL}};

typedef struct {
    const char *name;
    const char *help;
    mca_base_var_info_lvl_t level;
    const mca_base_var_enum_value_t *values; /* the first is the default */
    int value;                               /* storage Open MPI sets */
    int idx;                                 /* < 0: Open MPI refused the setting */
    mca_base_var_enum_t *e;                  /* the enumerator, wrapped below */
    mca_base_var_enum_vfs_fn_t value_from_string; /* Open MPI's own */
    mca_base_var_enum_sfv_fn_t string_from_value; /* Open MPI's own */
    char unknown[64];                        /* text that named no value */
} rustofi_enum_param_t;

/* Value of a parameter whose text names none of its values. */
#define RUSTOFI_ENUM_UNKNOWN (-4242)

static rustofi_enum_param_t enum_params[RUSTOFI_ENUM_COUNT] = {
    [RUSTOFI_ENUM_RNDV_PROTOCOL] = {
        "rndv_protocol",
        "Rendezvous data path: auto (RMA read when the provider has FI_RMA, else send where "
        "FI_TAGGED is in use, else msg), read (the receiver reads the sender's buffer with "
        "fi_read), send (the receiver grants a tag, the sender sends), or msg (the receiver "
        "grants, the sender sends pipelined data packets over plain sends into its bounce "
        "buffers)",
        OPAL_INFO_LVL_5, rndv_protocol_values},
    [RUSTOFI_ENUM_SHM] = {
        "shm",
        "Reach peers on the same host through shared memory, with one matching engine above it "
        "and the network provider: auto (the component's own shared-memory transport under "
        "every provider, efa included; if it cannot be opened, libfabric's shm provider where "
        "it helps, else the network provider), on (the own transport, required: the component "
        "declines without it), libfabric (libfabric's shm provider as a second endpoint, as "
        "before the own transport) or off",
        OPAL_INFO_LVL_3, shm_values},
    [RUSTOFI_ENUM_FAULT_INJECT] = {
        "fault_inject",
        "Testing only: none, rma_key (corrupt the key of the next rendezvous read so the "
        "provider reports a completion error), bad_packet (send one malformed packet) or "
        "lose_data (take every fourth arriving rendezvous data packet as lost by the provider) "
        "or lose_whole (take every fourth message-rendezvous grant, request or FIN and every "
        "1000th data packet as lost whole, so that the stalled transfer is repaired) or "
        "late_comm (Open MPI 5: rank 0 drives progress for 3 s before it registers a "
        "communicator that needs the index exchange, so that its peers' index messages arrive "
        "before it) or excid_lost (Open MPI 5: rank 0's first index message is not sent, and "
        "is reported failed once the peer's own index has arrived)",
        OPAL_INFO_LVL_9, fault_inject_values},
    [RUSTOFI_ENUM_TAGGED] = {
        "tagged",
        "FI_TAGGED: auto (asked for only where the send rendezvous needs it and the provider "
        "has it) or off (never asked for nor used; the rendezvous reads or goes by msg)",
        OPAL_INFO_LVL_5, tagged_values},
};

static rustofi_enum_param_t *param_of(mca_base_var_enum_t *self)
{
    for (int i = 0; i < RUSTOFI_ENUM_COUNT; i++) {
        if (enum_params[i].e == self) {
            return &enum_params[i];
        }
    }
    return NULL;
}

/* Open MPI would refuse a text that names no value with a message of its
 * own (and, on 4.1, a runtime error log while forwarding it), then run the
 * component with the default. Instead the text is kept and the component's
 * own validation refuses it with one message naming the parameter and its
 * values, and declines. */
static int lenient_value_from_string(mca_base_var_enum_t *self, const char *text, int *value)
{
    rustofi_enum_param_t *p = param_of(self);
    if (NULL == p) {
        return OPAL_ERR_VALUE_OUT_OF_BOUNDS;
    }
    int ret = p->value_from_string(self, text, value);
    if (OPAL_SUCCESS != ret) {
        snprintf(p->unknown, sizeof(p->unknown), "%s", text);
        *value = RUSTOFI_ENUM_UNKNOWN;
        ret = OPAL_SUCCESS;
    }
    return ret;
}

static int lenient_string_from_value(mca_base_var_enum_t *self, const int value, char **text)
{
    rustofi_enum_param_t *p = param_of(self);
    if (NULL == p) {
        return OPAL_ERR_VALUE_OUT_OF_BOUNDS;
    }
    if (RUSTOFI_ENUM_UNKNOWN == value) {
        if (NULL != text) {
            *text = strdup(p->unknown);
        }
        return OPAL_SUCCESS;
    }
    return p->string_from_value(self, value, text);
}

static int register_enums(const mca_base_component_t *component)
{
    for (int i = 0; i < RUSTOFI_ENUM_COUNT; i++) {
        rustofi_enum_param_t *p = &enum_params[i];
        char enum_name[128];
        mca_base_var_enum_t *e = NULL;
        snprintf(enum_name, sizeof(enum_name), "mtl_rustofi_%s", p->name);
        int ret = mca_base_var_enum_create(enum_name, p->values, &e);
        if (OPAL_SUCCESS != ret) {
            return ret;
        }
        p->e = e;
        p->value_from_string = e->value_from_string;
        p->string_from_value = e->string_from_value;
        e->value_from_string = lenient_value_from_string;
        e->string_from_value = lenient_string_from_value;
        p->value = p->values[0].value;
        p->idx = mca_base_component_var_register(component, p->name, p->help,
                                                 MCA_BASE_VAR_TYPE_INT, e, 0, 0, p->level,
                                                 MCA_BASE_VAR_SCOPE_READONLY, &p->value);
        OBJ_RELEASE(e);
    }
    return OPAL_SUCCESS;
}

const char *rustofi_enum_text(rustofi_enum_id_t which)
{
    const rustofi_enum_param_t *p = &enum_params[which];
    if (p->idx < 0) {
        /* Open MPI refused the user's text (it printed why); hand that
         * text on so the component declines with its own message. */
        char var[128];
        snprintf(var, sizeof(var), "OMPI_MCA_mtl_rustofi_%s", p->name);
        const char *raw = getenv(var);
        return NULL != raw ? raw : "(invalid)";
    }
    if (RUSTOFI_ENUM_UNKNOWN == p->value) {
        return p->unknown;
    }
    for (const mca_base_var_enum_value_t *v = p->values; NULL != v->string; v++) {
        if (v->value == p->value) {
            return v->string;
        }
    }
    return "(invalid)";
}

/* ---- output and help messages ----------------------------------------- */

static void site_output(const char *line)
{
    opal_output(0, "%s", line);
}

static void site_show_help(const char *topic, const char *msg)
{
    int rank = OPAL_VPID_INVALID == OMPI_PROC_MY_NAME->vpid ? -1
             : (int) OMPI_PROC_MY_NAME->vpid;
    const char *host = NULL != opal_process_info.nodename ? opal_process_info.nodename : "?";
#if OMPI_MAJOR_VERSION >= 5
    opal_show_help(RUSTOFI_HELP_FILE, topic, true, host, rank, msg);
#else
    /* Open MPI 4.1.4's mpirun intermittently fails to decode the help
     * messages ranks forward to it for aggregation ("ORTE_ERROR_LOG: Data
     * unpack would read past end of buffer in file orte/util/show_help.c",
     * seen with its own components' messages too) and then drops them. So
     * the message is rendered here and printed by this rank. */
    char *text = opal_show_help_string(RUSTOFI_HELP_FILE, topic, true, host, rank, msg);
    if (NULL != text) {
        opal_output(0, "%s", text);
        free(text);
    }
#endif
}

void rustofi_site_hooks(const mca_base_component_t *component)
{
    RustofiLogHooks hooks = {
        .output = site_output,
        .show_help = site_show_help,
    };
    (void) rustofi_set_log_hooks(&hooks);

    /* Installed, the help file sits in Open MPI's data directory, where
     * opal_show_help looks. Run from a build directory, it sits beside the
     * .so: add that directory to the search so messages are still printed
     * in full. */
    Dl_info info;
    if (0 == dladdr((const void *) component, &info) || NULL == info.dli_fname) {
        return;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (NULL == slash) {
        return;
    }
    *slash = '\0';
    char file[PATH_MAX + sizeof(RUSTOFI_HELP_FILE) + 1];
    snprintf(file, sizeof(file), "%s/%s", dir, RUSTOFI_HELP_FILE);
    if (0 == access(file, R_OK)) {
        (void) opal_show_help_add_dir(dir);
    }
}

/* ---- MPI_T performance variables -------------------------------------- */

static int pvar_get(const mca_base_pvar_t *pvar, void *value, void *obj)
{
    uint64_t v = 0;
    (void) rustofi_pvar_read((size_t) (uintptr_t) pvar->ctx, &v);
    *(unsigned long long *) value = (unsigned long long) v;
    return OPAL_SUCCESS;
}

static int pvar_class(RustofiPvarClass c)
{
    switch (c) {
    case RustofiPvarClass_Level:
        return MCA_BASE_PVAR_CLASS_LEVEL;
    case RustofiPvarClass_Highwatermark:
        return MCA_BASE_PVAR_CLASS_HIGHWATERMARK;
    case RustofiPvarClass_Counter:
    default:
        return MCA_BASE_PVAR_CLASS_COUNTER;
    }
}

static int register_pvars(const mca_base_component_t *component)
{
    size_t n = rustofi_pvar_count();
    for (size_t i = 0; i < n; i++) {
        const char *name = NULL, *desc = NULL;
        RustofiPvarClass cls = RustofiPvarClass_Counter;
        if (0 != rustofi_pvar_info(i, &name, &desc, &cls)) {
            continue;
        }
        int ret = mca_base_component_pvar_register(
            component, name, desc, OPAL_INFO_LVL_4, pvar_class(cls),
            MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL, MPI_T_BIND_NO_OBJECT,
            MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS, pvar_get, NULL, NULL,
            (void *) (uintptr_t) i);
        if (ret < 0) {
            opal_output(0, "mtl_rustofi: could not register MPI_T variable mtl_rustofi_%s: %d",
                        name, ret);
        }
    }
    return OPAL_SUCCESS;
}

int rustofi_site_register(const mca_base_component_t *component)
{
    int ret = register_enums(component);
    if (OPAL_SUCCESS != ret) {
        return ret;
    }
    return register_pvars(component);
}
