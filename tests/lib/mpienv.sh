# Sourced by the test scripts that launch mpirun themselves: Open MPI as
# root, the component under test found first, and nothing inherited from
# the caller's environment that would select other components or change
# the component's parameters (every run names what it needs).
# Needs RUSTOFI_MCA_DIR and OMPI_COMPONENT_DIR (scripts/ompi-prefix.sh).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mca_base_component_path=$RUSTOFI_MCA_DIR:$OMPI_COMPONENT_DIR
unset OMPI_MCA_pml OMPI_MCA_mtl
for _v in $(env | sed -n 's/^\(OMPI_MCA_mtl_rustofi_[a-z_]*\)=.*/\1/p'); do unset "$_v"; done
unset _v
